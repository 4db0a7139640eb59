#include "pipelined/transport.h"

#include <ATen/ATen.h>

#include <stdexcept>

#include "pipelined/rank_store.h"

namespace parity::pipelined {

std::string Tag::str() const {
  return std::to_string(forward ? from_stage : to_stage) + (forward ? "F" : "B") +
         std::to_string(mb) + " " + std::to_string(from_stage) + "->" + std::to_string(to_stage);
}

void Transport::count(const std::vector<at::Tensor>& tensors, const Tag& tag) {
  int64_t n = 0;
  for (const auto& t : tensors) n += t.numel() * static_cast<int64_t>(t.element_size());
  bytes_[{tag.mb, tag.forward}] += n;
}

int64_t Transport::bytes_sent(int mb, bool forward) const {
  auto it = bytes_.find({mb, forward});
  return it == bytes_.end() ? 0 : it->second;
}

int64_t Transport::total_bytes(bool forward) const {
  int64_t n = 0;
  for (const auto& b : bytes_)
    if (b.first.second == forward) n += b.second;
  return n;
}

std::vector<at::Tensor> Transport::take(std::vector<at::Tensor> tensors, const Tag& tag) {
  std::vector<at::Tensor> out;
  out.reserve(tensors.size());
  for (auto& held : tensors) {
    at::Tensor t = std::move(held);
    const bool alone = t.use_count() == 1 && t.storage().use_count() == 1 &&
                       t.is_contiguous() && t.storage_offset() == 0 &&
                       t.storage().nbytes() == t.nbytes();
    out.push_back(alone ? t.detach() : t.detach().clone(at::MemoryFormat::Contiguous));
  }
  count(out, tag);
  return out;
}

void Mailboxes::send(std::vector<at::Tensor> tensors, int, const Tag& tag) {
  if (!boxes_.emplace(tag, take(std::move(tensors), tag)).second)
    throw std::logic_error("in-process transport: a second message for " + tag.str());
}

bool Mailboxes::ready(int, const Tag& tag) { return boxes_.count(tag) != 0; }

std::vector<at::Tensor> Mailboxes::recv(int, const Tag& tag, const std::vector<TensorSpec>& like) {
  auto it = boxes_.find(tag);
  if (it == boxes_.end())
    throw std::logic_error("in-process transport: no message for " + tag.str());
  auto out = std::move(it->second);
  boxes_.erase(it);
  bool same = out.size() == like.size();
  for (size_t i = 0; same && i < out.size(); ++i)
    same = out[i].sizes().vec() == like[i].shape && out[i].scalar_type() == like[i].dtype;
  if (!same)
    throw ProtocolError("message " + tag.str() + ": " + std::to_string(out.size()) +
                        " tensors that do not match the " + std::to_string(like.size()) +
                        " the routing tables expect");
  return out;
}

}  // namespace parity::pipelined
