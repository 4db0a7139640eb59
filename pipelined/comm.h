// Multi-process execution (docs/design.md section 5, "Executors / transports"): one process per
// rank, real point-to-point messages over torch c10d.
//
// A Comm is a Transport between processes plus the two collectives the trainer needs after a
// step (broadcast from one rank; a barrier). Ranks are numbered dp_rank * pp + pp_rank.
// Every wait has a timeout; a message that does not come, or a peer that died, becomes a
// CommError naming this rank, the action, the peer and the time waited.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipelined/transport.h"

namespace parity::pipelined {

class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CommOptions {
  std::string backend = "gloo";
  int rank = 0, world = 1;
  int local_rank = 0;  // the rank on its machine (LOCAL_RANK): which GPU a CUDA run uses
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  double timeout_s = 300;
};

class Comm : public Transport {
 public:
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // Every rank passes a tensor of the same shape and dtype; afterwards all hold root's values.
  virtual void broadcast(at::Tensor& t, int root) = 0;
  // Waits for every send this rank posted (their tensors stay alive until then).
  virtual void flush() = 0;
  virtual void barrier() = 0;
  // Point-to-point ranks are pipeline ranks (0..pp-1) of this process's dp group; the group's
  // first global rank is added to them.
  void set_peer_offset(int offset) { peer_offset_ = offset; }

 protected:
  int peer_offset_ = 0;

 public:
  bool ready(int, const Tag&) override { return true; }  // receives block, with the timeout
};

// The backends this build has ("gloo" when the Gloo headers were found).
std::vector<std::string> comm_backends();

// Rendezvous through a TCPStore at master_addr:master_port (rank 0 serves it). Throws
// kernels::ConfigError for a backend this build lacks or a port in use, CommError when the
// rendezvous times out.
std::unique_ptr<Comm> make_comm(const CommOptions& o);
// Throws the same ConfigError as make_comm when `backend` is not built, without connecting.
void make_comm_check(const std::string& backend);

}  // namespace parity::pipelined
