// Nightly history: one JSON line per matrix run appended to a file, and the trend it shows
// (docs/design.md section 7). Torch-free.
//
// A line: {"started", "git_sha", "matrix", "source", "wall_seconds", "cells": [{"name",
// "status", "verdict", "gate", "final_step", "final_loss", "final_loss_drift_pct"}]}.
// final_loss_drift_pct is the signed % change of the cell's last logged loss against its
// reference's loss at the same step (null for a reference or when either is missing).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "reports/results.h"

namespace parity::reports {

struct HistoryCell {
  std::string name;
  std::string status;
  std::string verdict;  // step1_verdict
  std::string gate;     // "-", "pass", "FAIL"
  int64_t final_step = 0;
  double final_loss = 0;
  std::optional<double> final_loss_drift_pct;
};

struct HistoryEntry {
  std::string started, git_sha, matrix, source;
  double wall_seconds = 0;
  std::vector<HistoryCell> cells;
};

HistoryEntry history_entry(const MatrixResult& r);
// Appends one line; MatrixError naming the file when it cannot be written.
void append_history(const std::string& path, const MatrixResult& r);
// The last `last` entries of the file (all when last <= 0), oldest first. MatrixError naming
// the file and line when a line is malformed; an absent file is an empty history.
std::vector<HistoryEntry> read_history(const std::string& path, int last = 0);

// Per cell (the union of cells, in the newest run's order, then the rest), its verdict and
// drift in each run, and whether its verdict changed between any two consecutive runs
// (EXACT and BITWISE count as one outcome: equal bits).
struct TrendRow {
  std::string cell;
  std::vector<std::string> verdicts;               // per run; "" when absent from that run
  std::vector<std::optional<double>> drift_pct;    // per run
  bool changed = false;
};
struct Trend {
  std::vector<HistoryEntry> runs;  // oldest first
  std::vector<TrendRow> rows;
  int changed() const;
};
Trend trend(std::vector<HistoryEntry> runs);

}  // namespace parity::reports
