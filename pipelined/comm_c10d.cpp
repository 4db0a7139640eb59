#include "pipelined/comm.h"

#include <torch/torch.h>

#include <chrono>

#include "kernels/config.h"
#include "spec/bad_input.h"

#if defined(PARITY_HAVE_GLOO) || defined(PARITY_HAVE_NCCL)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#define PARITY_HAVE_C10D 1
#endif
#ifdef PARITY_HAVE_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef PARITY_HAVE_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace parity::pipelined {

std::vector<std::string> comm_backends() {
  std::vector<std::string> out;
#ifdef PARITY_HAVE_GLOO
  out.push_back("gloo");
#endif
#ifdef PARITY_HAVE_NCCL
  out.push_back("nccl");
#endif
  return out;
}

#ifdef PARITY_HAVE_C10D
namespace {

std::chrono::milliseconds millis(double s) {
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}

// One c10d tag per tensor of a message: the tag's fields, then the tensor's index.
int wire_tag(const Tag& t, int index) {
  return ((((t.forward ? 0 : 1) * 1024 + t.from_stage) * 1024 + t.to_stage) * 4096 + t.mb) * 4 +
         index;
}

// "3F1 (stage 2 -> 3)": the action the message feeds, the receiver's forward or backward.
std::string describe(const Tag& t) {
  return std::to_string(t.to_stage) + (t.forward ? "F" : "B") + std::to_string(t.mb) +
         " (stage " + std::to_string(t.from_stage) + " -> " + std::to_string(t.to_stage) + ")";
}

// Checked before the store binds the port, so the answer is one line rather than c10d's log.
bool port_in_use(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool busy = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno == EADDRINUSE;
  ::close(fd);
  return busy;
}

// The rendezvous: a TCPStore that rank 0 serves.
c10::intrusive_ptr<c10d::Store> make_store(const CommOptions& o) {
  if (o.rank == 0 && port_in_use(o.master_port))
    throw kernels::ConfigError("rank 0 cannot serve the rendezvous on port " +
                               std::to_string(o.master_port) +
                               ": the port is in use; pick another MASTER_PORT");
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(o.master_port);
  so.isServer = o.rank == 0;
  so.numWorkers = o.world;
  so.timeout = millis(o.timeout_s);
  try {
    return c10::make_intrusive<c10d::TCPStore>(o.master_addr, so);
  } catch (const std::exception& e) {
    throw CommError("rank " + std::to_string(o.rank) + ": rendezvous at " + o.master_addr + ":" +
                    std::to_string(o.master_port) + " failed: " + spec::first_line(e.what()));
  }
}

// A c10d process group of type PG (ProcessGroupGloo for CPU tensors, ProcessGroupNCCL for CUDA
// ones) behind the Comm interface. The group's type is a parameter rather than a base class:
// torch releases differ in the base the groups derive from.
template <typename PG>
class C10dComm : public Comm {
 public:
  C10dComm(const CommOptions& o, c10::intrusive_ptr<c10d::Store> store, c10::intrusive_ptr<PG> pg)
      : rank_(o.rank),
        world_(o.world),
        timeout_s_(o.timeout_s),
        store_(std::move(store)),
        pg_(std::move(pg)) {}

  int rank() const override { return rank_; }
  int world() const override { return world_; }

  void send(std::vector<at::Tensor> tensors, int to_rank, const Tag& tag) override {
    const auto dense = take(std::move(tensors), tag);  // held until the send completes
    for (size_t i = 0; i < dense.size(); ++i) {
      std::vector<at::Tensor> one{dense[i]};
      const int to = to_rank + peer_offset_;
      auto work = post([&] { return pg_->send(one, to, wire_tag(tag, static_cast<int>(i))); },
                       "send of " + describe(tag) + " to rank " + std::to_string(to));
      pending_.push_back({work, dense[i], tag, to});
    }
  }

  std::vector<at::Tensor> recv(int from_rank, const Tag& tag,
                               const std::vector<TensorSpec>& like) override {
    std::vector<at::Tensor> out;
    for (size_t i = 0; i < like.size(); ++i) {
      auto t = at::empty(like[i].shape, at::TensorOptions().dtype(like[i].dtype).device(like[i].device));
      std::vector<at::Tensor> one{t};
      const int from = from_rank + peer_offset_;
      const std::string what = "recv of " + describe(tag) + " from rank " + std::to_string(from);
      wait(post([&] { return pg_->recv(one, from, wire_tag(tag, static_cast<int>(i))); }, what),
           what);
      out.push_back(t);
    }
    return out;
  }

  void broadcast(at::Tensor& t, int root) override {
    // A broadcast is a copy: bf16 travels as its 16-bit patterns viewed as fp16, since Gloo's
    // broadcast has no bf16 (nor int16) kernel in every torch (1.13 refuses both: "Invalid
    // scalar type"). Nothing is computed on the way, so every bit arrives as it left.
    std::vector<at::Tensor> one{t.scalar_type() == at::kBFloat16 ? t.view(at::kHalf) : t};
    c10d::BroadcastOptions bo;
    bo.rootRank = root;
    const std::string what =
        "the step's gradient and loss broadcast from rank " + std::to_string(root);
    wait(post([&] { return pg_->broadcast(one, bo); }, what), what);
  }

  void flush() override {
    for (auto& p : pending_)
      wait(p.work, "send of " + describe(p.tag) + " to rank " + std::to_string(p.to));
    pending_.clear();
  }

  void barrier() override {
    wait(post([&] { return pg_->barrier(); }, "the end-of-run barrier"), "the end-of-run barrier");
  }

 private:
  using Work = decltype(std::declval<PG&>().barrier());
  struct Pending {
    Work work;
    at::Tensor tensor;  // alive until the send completes
    Tag tag;
    int to;
  };

  // Posting can fail at once (a peer already gone): the same one-line error as a wait.
  template <typename F>
  Work post(F f, const std::string& what) {
    try {
      return f();
    } catch (const std::exception& e) {
      throw CommError("rank " + std::to_string(rank_) + ": " + what + " failed: " +
                      spec::first_line(e.what()));
    }
  }

  void wait(const Work& w, const std::string& what) {
    try {
      w->wait(millis(timeout_s_));
    } catch (const std::exception& e) {
      throw CommError("rank " + std::to_string(rank_) + ": " + what + " failed (timeout " +
                      std::to_string(static_cast<int>(timeout_s_)) + " s): " +
                      spec::first_line(e.what()));
    }
  }

  int rank_, world_;
  double timeout_s_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<PG> pg_;
  std::vector<Pending> pending_;
};

}  // namespace
#endif

void make_comm_check(const std::string& backend) {
  for (const auto& b : comm_backends())
    if (b == backend) return;
  std::string have;
  for (const auto& b : comm_backends()) have += (have.empty() ? "" : ", ") + b;
  throw kernels::ConfigError(
      "backend '" + backend + "' is not built into this parity (it has: " +
      (have.empty() ? std::string("none; install libgloo-dev and rebuild") : have) + ")");
}

std::unique_ptr<Comm> make_comm(const CommOptions& o) {
  if (o.world < 1 || o.rank < 0 || o.rank >= o.world)
    throw kernels::ConfigError("RANK " + std::to_string(o.rank) + " is outside WORLD_SIZE " +
                               std::to_string(o.world));
  make_comm_check(o.backend);
#ifdef PARITY_HAVE_GLOO
  if (o.backend == "gloo") {
    auto store = make_store(o);
    auto opts = c10d::ProcessGroupGloo::Options::create(millis(o.timeout_s));
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(o.master_addr));
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, o.rank, o.world, opts);
    return std::make_unique<C10dComm<c10d::ProcessGroupGloo>>(o, store, pg);
  }
#endif
#ifdef PARITY_HAVE_NCCL
  // Compiled where torch has CUDA and nccl.h is found; not run on a machine with two GPUs yet.
  if (o.backend == "nccl") {
    auto store = make_store(o);
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = millis(o.timeout_s);
    auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, o.rank, o.world, opts);
    return std::make_unique<C10dComm<c10d::ProcessGroupNCCL>>(o, store, pg);
  }
#endif
  return nullptr;  // unreachable: make_comm_check threw
}

}  // namespace parity::pipelined
