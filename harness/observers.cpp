#include "harness/observers.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "harness/errors.h"
#include "kernels/vector_kernels.h"

namespace parity::harness {

std::string hex_float(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

void ConsoleObserver::on_start(const kernels::RunInfo& info) {
  steps_ = info.steps;
  if (quiet_) return;
  std::cout << "parity train: trainer " << info.trainer << ", flavor " << info.flavor << ", "
            << info.precision << " (grad accumulation " << info.grad_accum << "), dp " << info.dp
            << " x " << info.microbatches << " micro-batches x " << info.rows << " rows x "
            << info.seq_len << " tokens, " << info.steps << " steps, seed " << info.seed << ", "
            << info.threads << " thread(s) (" << kernels::vector_kernels_text() << "), "
            << info.device << "\n"
            << std::flush;
}

void ConsoleObserver::on_step(const kernels::StepRecord& r) {
  total_seconds_ += r.seconds;
  if (quiet_) return;
  const double eta = total_seconds_ / r.step * (steps_ - r.step);
  char line[256];
  std::snprintf(line, sizeof line,
                "step %4lld/%lld  loss %.6f  grad_norm %.4f  lr %.3e  %.2f s/step  %.0f tok/s  "
                "eta %.0fs\n",
                static_cast<long long>(r.step), static_cast<long long>(steps_),
                r.loss.item<double>(), r.grad_norm.item<double>(), r.lr, r.seconds,
                r.tokens / r.seconds, eta);
  std::cout << line << std::flush;
}

void ConsoleObserver::on_end() {
  if (quiet_ || steps_ == 0) return;
  std::cout << "done: " << steps_ << " steps in " << total_seconds_ << " s\n";
}

namespace {

dumps::AtomicTextFile open_metrics(const std::string& path) {
  try {
    return dumps::AtomicTextFile(path);
  } catch (const std::exception& e) {
    throw UsageError(std::string("--metrics: ") + e.what() + "; give a writable path");
  }
}

}  // namespace

JsonlObserver::JsonlObserver(const std::string& path) : file_(open_metrics(path)) {}

JsonlObserver::~JsonlObserver() {
  try {
    file_.commit();
  } catch (...) {  // a destructor must not throw: the temporary is removed instead
  }
}

void JsonlObserver::on_step(const kernels::StepRecord& r) {
  const double loss = r.loss.item<double>();
  const double norm = r.grad_norm.item<double>();
  nlohmann::json mb = nlohmann::json::array();
  for (const auto& l : r.mb_losses) mb.push_back(l.item<double>());
  nlohmann::json j = {{"step", r.step},          {"loss", loss},
                      {"grad_norm", norm},       {"lr", r.lr},
                      {"mb_losses", mb},         {"loss_hex", hex_float(loss)},
                      {"grad_norm_hex", hex_float(norm)}};
  file_.write(j.dump() + "\n");  // one write per step: a later failure keeps it
  ++steps_;
}

void JsonlObserver::on_end() { file_.commit(); }

void JsonlObserver::on_abort() { file_.commit(); }

void SummaryObserver::on_step(const kernels::StepRecord& r) {
  seconds_.push_back(r.seconds);
  tokens_ = r.tokens;
}

void SummaryObserver::write(int64_t bytes_forward, int64_t bytes_backward,
                            const std::vector<int64_t>* fwd_per_mb,
                            const std::vector<int64_t>* bwd_per_mb) {
  auto mean = [](const std::vector<int64_t>* v) -> int64_t {
    if (!v || v->empty()) return -1;
    int64_t sum = 0;
    for (auto b : *v) sum += b;
    return sum / static_cast<int64_t>(v->size());
  };
  std::vector<double> sorted = seconds_;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted.empty() ? 0.0 : sorted[sorted.size() / 2];
  nlohmann::json j = {{"steps", seconds_.size()},
                      {"tokens_per_step", tokens_},
                      {"seconds", seconds_},
                      {"seconds_per_step", median},
                      {"bytes_forward_per_mb", mean(fwd_per_mb)},
                      {"bytes_backward_per_mb", mean(bwd_per_mb)},
                      {"bytes_forward", fwd_per_mb ? bytes_forward : -1},
                      {"bytes_backward", bwd_per_mb ? bytes_backward : -1}};
  try {
    dumps::write_file_atomically(path_, j.dump(1) + "\n");
  } catch (const std::exception& e) {
    throw UsageError(std::string("--summary: ") + e.what());
  }
}

void ObserverList::on_start(const kernels::RunInfo& info) {
  for (auto* o : observers_) o->on_start(info);
}
bool ObserverList::wants_tensors(int64_t step) const {
  for (auto* o : observers_)
    if (o->wants_tensors(step)) return true;
  return false;
}
void ObserverList::on_step(const kernels::StepRecord& r) {
  for (auto* o : observers_) o->on_step(r);
}
void ObserverList::on_abort() {
  for (auto* o : observers_) o->on_abort();
}

void ObserverList::on_end() {
  for (auto* o : observers_) o->on_end();
}

}  // namespace parity::harness
