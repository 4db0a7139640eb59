#include "pipelined/comm.h"

#include <torch/torch.h>

#include <chrono>

#include "kernels/config.h"

#ifdef PARITY_HAVE_GLOO
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif

namespace parity::pipelined {

std::vector<std::string> comm_backends() {
#ifdef PARITY_HAVE_GLOO
  return {"gloo"};
#else
  return {};
#endif
}

#ifdef PARITY_HAVE_GLOO
namespace {

// One c10d tag per tensor of a message: the tag's fields, then the tensor's index.
int wire_tag(const Tag& t, int index) {
  return ((((t.forward ? 0 : 1) * 1024 + t.from_stage) * 1024 + t.to_stage) * 4096 + t.mb) * 4 +
         index;
}

class GlooComm : public Comm {
 public:
  GlooComm(const CommOptions& o) : rank_(o.rank), world_(o.world), timeout_s_(o.timeout_s) {
    const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
    if (o.rank == 0 && port_in_use(o.master_port))
      throw kernels::ConfigError("rank 0 cannot serve the rendezvous on port " +
                                 std::to_string(o.master_port) +
                                 ": the port is in use; pick another MASTER_PORT");
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(o.master_port);
    so.isServer = o.rank == 0;
    so.numWorkers = o.world;
    so.timeout = timeout;
    try {
      store_ = c10::make_intrusive<c10d::TCPStore>(o.master_addr, so);
    } catch (const std::exception& e) {
      const std::string what = e.what();
      if (o.rank == 0 && what.find("ddress already in use") != std::string::npos)
        throw kernels::ConfigError("rank 0 cannot serve the rendezvous on " + o.master_addr + ":" +
                                   std::to_string(o.master_port) +
                                   ": the port is in use; pick another MASTER_PORT");
      throw CommError("rank " + std::to_string(o.rank) + ": rendezvous at " + o.master_addr + ":" +
                      std::to_string(o.master_port) + " failed: " + first_line(what));
    }
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(o.master_addr));
    pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store_, o.rank, o.world, opts);
  }

  int rank() const override { return rank_; }
  int world() const override { return world_; }

  void send(const std::vector<at::Tensor>& tensors, int to_rank, const Tag& tag) override {
    std::vector<at::Tensor> dense;
    for (const auto& t : tensors) dense.push_back(t.detach().contiguous().clone());
    count(dense, tag);
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
      auto t = at::empty(like[i].shape, at::TensorOptions().dtype(like[i].dtype));
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
    std::vector<at::Tensor> one{t};
    c10d::BroadcastOptions bo;
    bo.rootRank = root;
    const std::string what = "the step's gradient and loss broadcast from rank " + std::to_string(root);
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
  struct Pending {
    c10::intrusive_ptr<c10d::Work> work;
    at::Tensor tensor;  // alive until the send completes
    Tag tag;
    int to;
  };

  static std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

  // Checked before the store binds it, so the answer is one line rather than c10d's log.
  static bool port_in_use(int port) {
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

  // "3F1" for the action the message feeds: the receiver's forward, or its backward.
  static std::string describe(const Tag& t) {
    return std::to_string(t.to_stage) + (t.forward ? "F" : "B") + std::to_string(t.mb) +
           " (stage " + std::to_string(t.from_stage) + " -> " + std::to_string(t.to_stage) + ")";
  }

  // Posting can fail at once (a peer already gone): the same one-line error as a wait.
  template <typename F>
  c10::intrusive_ptr<c10d::Work> post(F f, const std::string& what) {
    try {
      return f();
    } catch (const std::exception& e) {
      throw CommError("rank " + std::to_string(rank_) + ": " + what + " failed: " +
                      first_line(e.what()));
    }
  }

  void wait(const c10::intrusive_ptr<c10d::Work>& w, const std::string& what) {
    try {
      w->wait(std::chrono::milliseconds(static_cast<int64_t>(timeout_s_ * 1000)));
    } catch (const std::exception& e) {
      throw CommError("rank " + std::to_string(rank_) + ": " + what + " failed (timeout " +
                      std::to_string(static_cast<int>(timeout_s_)) + " s): " + first_line(e.what()));
    }
  }

  int rank_, world_;
  double timeout_s_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
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
  return std::make_unique<GlooComm>(o);
#else
  return nullptr;  // unreachable: make_comm_check threw
#endif
}

}  // namespace parity::pipelined
