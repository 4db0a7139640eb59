// How stages exchange tensors (docs/design.md section 5, "Executors / transports").
//
// A message is (hidden, delta) forward and (d hidden, d delta) backward; the delta is omitted
// when the tables say it is empty, on both sides. Tensors are made dense before they leave.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace parity::pipelined {

struct Tag {
  int from_stage = 0, to_stage = 0, mb = 0;
  bool forward = true;
  std::string str() const;  // "1F3 -> 2" style, for errors
  bool operator<(const Tag& o) const {
    return std::tie(forward, from_stage, to_stage, mb) <
           std::tie(o.forward, o.from_stage, o.to_stage, o.mb);
  }
};

// What a receiver expects, from the routing tables: the shape and dtype of each tensor. A
// transport that moves raw bytes (c10d) allocates from it; the in-process one checks it.
struct TensorSpec {
  std::vector<int64_t> shape;
  at::ScalarType dtype = at::kFloat;
  at::Device device = at::kCPU;
};

class Transport {
 public:
  virtual ~Transport() = default;
  // Takes the tensors: one the caller no longer holds (a fresh dense tensor moved in) leaves
  // as it is; any other is copied first, so no later write on either side reaches the other.
  virtual void send(std::vector<at::Tensor> tensors, int to_rank, const Tag& tag) = 0;
  // Whether the message has arrived (the in-process scheduler asks before it runs an action).
  virtual bool ready(int from_rank, const Tag& tag) = 0;
  // The message, one tensor per spec; throws ProtocolError when it does not match them.
  virtual std::vector<at::Tensor> recv(int from_rank, const Tag& tag,
                                       const std::vector<TensorSpec>& like) = 0;

  // Bytes sent, per micro-batch and direction, over the whole run.
  int64_t bytes_sent(int mb, bool forward) const;
  int64_t total_bytes(bool forward) const;
  void reset_counters() { bytes_.clear(); }

 protected:
  void count(const std::vector<at::Tensor>& tensors, const Tag& tag);
  // What leaves for the receiver, counted: each tensor itself, detached, when nothing else
  // references it or its storage and it is dense over the whole storage; otherwise a dense copy.
  std::vector<at::Tensor> take(std::vector<at::Tensor> tensors, const Tag& tag);

 private:
  std::map<std::pair<int, bool>, int64_t> bytes_;
};

// The in-process transport: one mailbox per tag. The receiver gets memory no one else holds,
// as over a wire: a copy, or the sender's own dense tensor when it gave that up (send()).
class Mailboxes : public Transport {
 public:
  void send(std::vector<at::Tensor> tensors, int to_rank, const Tag& tag) override;
  bool ready(int from_rank, const Tag& tag) override;
  std::vector<at::Tensor> recv(int from_rank, const Tag& tag,
                               const std::vector<TensorSpec>& like) override;
  bool empty() const { return boxes_.empty(); }

 private:
  std::map<Tag, std::vector<at::Tensor>> boxes_;
};

}  // namespace parity::pipelined
