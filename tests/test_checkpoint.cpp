// Seed checkpoints (dumps/checkpoint.h): version 2 carries the persistent buffers (the expert
// biases) beside the parameters; version 1 files, written before, still read with zero
// buffers; a buffer that is missing, mis-shaped or not finite is refused naming it.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "dumps/checkpoint.h"
#include "dumps/h5.h"
#include "kernels/config.h"
#include "kernels/params.h"
#include "tests/temp_dir.h"

namespace {

namespace d = parity::dumps;
namespace k = parity::kernels;
namespace h5 = parity::h5;

class Checkpoint : public parity::testing::TempDirTest {
 protected:
  std::string p(const std::string& name) const { return (dir_ / name).string(); }

  // A version-1 file as parity wrote it before buffers were kept: the parameters alone.
  void write_v1(const std::string& path, const k::ModelConfig& cfg,
                const k::NamedTensors& params) {
    auto f = h5::File::create(path);
    h5::set_attr(f, "/", "schema", "parity-checkpoint");
    h5::set_attr(f, "/", "schema_version", int64_t{1});
    h5::set_attr(f, "/", "flavor", cfg.name);
    h5::set_attr(f, "/", "seed", int64_t{3});
    h5::set_attr(f, "/", "git_sha", "x");
    h5::set_attr(f, "/", "param_count", static_cast<int64_t>(params.size()));
    for (size_t i = 0; i < params.size(); ++i)
      h5::write(f, "/params/" + params.names()[i], h5::DType::F32, params[i].sizes().vec(),
                params[i].contiguous().data_ptr());
    f.commit();
  }
};

const char* kBias = "layers.1.moe.expert_bias_E";

TEST_F(Checkpoint, BuffersRoundTripAndVersionOneReadsWithZeroBuffers) {
  const auto cfg = k::flavor("tiny");
  const auto params = k::init_params(cfg, 3);
  auto bias = at::tensor({0.25f, -1.5f, 0.0f, 3.0f});
  d::write_checkpoint(p("v2.h5"), cfg, 3, params, k::NamedTensors({kBias}, {bias}), "x");
  auto ck = d::read_checkpoint(p("v2.h5"), cfg);
  ASSERT_EQ(ck.buffers.size(), 16u);  // one per MoE layer, 1-16
  EXPECT_TRUE(at::equal(ck.buffers.at(kBias), bias));
  EXPECT_TRUE(at::equal(ck.buffers.at("layers.16.moe.expert_bias_E"), at::zeros({4})));
  for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(at::equal(ck.params[i], params[i]));

  write_v1(p("v1.h5"), cfg, params);
  auto old = d::read_checkpoint(p("v1.h5"), cfg);
  EXPECT_EQ(old.buffers.size(), 0u);  // the run starts them at zero
  EXPECT_EQ(old.params.size(), params.size());
}

TEST_F(Checkpoint, ANonFiniteOrMisshapedBufferIsRefusedNamingIt) {
  const auto cfg = k::flavor("tiny");
  const auto params = k::init_params(cfg, 3);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  d::write_checkpoint(p("nan.h5"), cfg, 3, params,
                      k::NamedTensors({kBias}, {at::tensor({0.0f, nan, 0.0f, 0.0f})}), "x");
  try {
    d::read_checkpoint(p("nan.h5"), cfg);
    ADD_FAILURE() << "a NaN bias was read";
  } catch (const d::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find(std::string("buffer ") + kBias), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("at index 1"), std::string::npos) << e.what();
  }
  d::write_checkpoint(p("shape.h5"), cfg, 3, params, k::NamedTensors({kBias}, {at::zeros({5})}),
                      "x");
  try {
    d::read_checkpoint(p("shape.h5"), cfg);
    ADD_FAILURE() << "a [5] bias was read for 4 experts";
  } catch (const d::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("expected float32 [4]"), std::string::npos) << e.what();
  }
}

}  // namespace
