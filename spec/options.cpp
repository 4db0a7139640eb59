#include "spec/options.h"

namespace parity::spec {

const Choices<Flavor>& flavors() {
  static const Choices<Flavor> t{"--flavor",
                                 {{Flavor::Debugmodel, "debugmodel"},
                                  {Flavor::Tiny, "tiny"},
                                  {Flavor::K3shape, "k3shape"},
                                  {Flavor::Exact, "exact"},
                                  {Flavor::ExactWide, "exact-wide"}}};
  return t;
}

const Choices<Precision>& precisions() {
  static const Choices<Precision> t{"--dtype",
                                    {{Precision::FP32, "fp32"},
                                     {Precision::BF16, "bf16"},
                                     {Precision::BF16Master, "bf16-master"},
                                     {Precision::FP64, "fp64"}}};
  return t;
}

const Choices<Trainer>& trainers() {
  static const Choices<Trainer> t{
      "--trainer", {{Trainer::Reference, "reference"}, {Trainer::Pipelined, "pipelined"}}};
  return t;
}

const Choices<ScheduleKind>& schedules() {
  static const Choices<ScheduleKind> t{
      "--schedule",
      {{ScheduleKind::OneFOneB, "1f1b"}, {ScheduleKind::Interleaved1F1B, "interleaved1f1b"}},
      Case::Fold};
  return t;
}

const Choices<Cache>& caches() {
  static const Choices<Cache> t{"--cache", {{Cache::On, "on"}, {Cache::Off, "off"}}};
  return t;
}

const Choices<KdaImpl>& kda_forms() {
  static const Choices<KdaImpl> t{"--kda",
                                  {{KdaImpl::Fused, "fused"},
                                   {KdaImpl::Chunked, "chunked"},
                                   {KdaImpl::Recurrent, "recurrent"}}};
  return t;
}

const Choices<AttnResImpl>& attn_res_forms() {
  static const Choices<AttnResImpl> t{"--attn-res",
                                      {{AttnResImpl::Fused, "fused"},
                                       {AttnResImpl::Recompute, "recompute"},
                                       {AttnResImpl::Plain, "plain"}}};
  return t;
}

const Choices<Checkpointing>& checkpointing_modes() {
  static const Choices<Checkpointing> t{
      "--ac", {{Checkpointing::None, "none"}, {Checkpointing::Layer, "layer"}}};
  return t;
}

const Choices<GradAccum>& grad_accums() {
  static const Choices<GradAccum> t{
      "--grad-accum",
      {{GradAccum::Auto, "auto"}, {GradAccum::BF16, "bf16"}, {GradAccum::FP32, "fp32"}}};
  return t;
}

const Choices<ClipOrder>& clip_orders() {
  static const Choices<ClipOrder> t{
      "--clip-order", {{ClipOrder::Single, "single"}, {ClipOrder::PerRank, "per-rank"}}};
  return t;
}

const Choices<GradNormDtype>& grad_norm_dtypes() {
  static const Choices<GradNormDtype> t{
      "--grad-norm-dtype", {{GradNormDtype::FP32, "fp32"}, {GradNormDtype::BF16, "bf16"}}};
  return t;
}

const Choices<Documents>& document_modes() {
  static const Choices<Documents> t{"--documents", {{Documents::Off, "off"}, {Documents::On, "on"}}};
  return t;
}

const Choices<LrSchedule>& lr_schedules() {
  static const Choices<LrSchedule> t{
      "--lr-schedule", {{LrSchedule::WSD, "wsd"}, {LrSchedule::Constant, "constant"}}};
  return t;
}

const Choices<Device>& devices() {
  static const Choices<Device> t{"--device", {{Device::Cpu, "cpu"}, {Device::Cuda, "cuda"}}};
  return t;
}

const Choices<Backend>& backends() {
  static const Choices<Backend> t{"--backend", {{Backend::Gloo, "gloo"}, {Backend::Nccl, "nccl"}}};
  return t;
}

const Choices<PseudoQueryInit>& pseudo_query_inits() {
  static const Choices<PseudoQueryInit> t{
      "--pseudo-query-init",
      {{PseudoQueryInit::TruncNormal, "trunc-normal"}, {PseudoQueryInit::Zero, "zero"}}};
  return t;
}

const Choices<TokenDtype>& token_dtypes() {
  static const Choices<TokenDtype> t{
      "--tokens-dtype",
      {{TokenDtype::U16, "uint16"}, {TokenDtype::I32, "int32"}, {TokenDtype::I64, "int64"}}};
  return t;
}

const Choices<ReportFormat>& report_formats() {
  static const Choices<ReportFormat> t{"--format",
                                       {{ReportFormat::Txt, "txt"},
                                        {ReportFormat::Md, "md"},
                                        {ReportFormat::Json, "json"},
                                        {ReportFormat::Csv, "csv"},
                                        {ReportFormat::Html, "html"}}};
  return t;
}

const Choices<BenchTarget>& bench_targets() {
  static const Choices<BenchTarget> t{"--what",
                                      {{BenchTarget::Reference, "reference"},
                                       {BenchTarget::Step, "step"},
                                       {BenchTarget::Pipelined, "pipelined"},
                                       {BenchTarget::Ratio, "ratio"},
                                       {BenchTarget::AcRatio, "ac-ratio"},
                                       {BenchTarget::ThreadsRatio, "threads-ratio"},
                                       {BenchTarget::Kda, "kda"},
                                       {BenchTarget::Compare, "compare"},
                                       {BenchTarget::Gemm, "gemm"},
                                       {BenchTarget::Readers, "readers"}}};
  return t;
}

const char* to_string(Flavor v) { return flavors().name(v); }
const char* to_string(Precision v) { return precisions().name(v); }
const char* to_string(Trainer v) { return trainers().name(v); }
const char* to_string(ScheduleKind v) { return schedules().name(v); }
const char* to_string(Cache v) { return caches().name(v); }
const char* to_string(KdaImpl v) { return kda_forms().name(v); }
const char* to_string(AttnResImpl v) { return attn_res_forms().name(v); }
const char* to_string(Checkpointing v) { return checkpointing_modes().name(v); }
const char* to_string(GradAccum v) { return grad_accums().name(v); }
const char* to_string(ClipOrder v) { return clip_orders().name(v); }
const char* to_string(GradNormDtype v) { return grad_norm_dtypes().name(v); }
const char* to_string(Documents v) { return document_modes().name(v); }
const char* to_string(LrSchedule v) { return lr_schedules().name(v); }
const char* to_string(Device v) { return devices().name(v); }
const char* to_string(Backend v) { return backends().name(v); }
const char* to_string(PseudoQueryInit v) { return pseudo_query_inits().name(v); }
const char* to_string(TokenDtype v) { return token_dtypes().name(v); }
const char* to_string(ReportFormat v) { return report_formats().name(v); }
const char* to_string(BenchTarget v) { return bench_targets().name(v); }

ScheduleKind default_schedule(int vp) {
  return vp == 1 ? ScheduleKind::OneFOneB : ScheduleKind::Interleaved1F1B;
}

}  // namespace parity::spec
