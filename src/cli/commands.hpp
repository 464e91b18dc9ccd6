// Subcommands of the `gridspan` program.
#pragma once

#include <string>
#include <vector>

namespace gridspan::cli {

/// How the demo cuts its arrays: its own chunks (the default), `pieces` chunks and
/// superblocks per device, Dask's 128 MiB chunks, Legate's 1 Mi elements a piece, or
/// gridspan's automatic choice (dist::automatic, work::automatic).
struct DemoCut {
  enum Kind { own, hand, dask, legate, automatic } kind = own;
  int pieces = 0;  // hand: per device
  std::string name() const;
};
struct DemoOptions {
  int scale = 1;
  std::string only;
  DemoCut cut;
};
int run_demo(const DemoOptions& options);
/// Each problem (or `options.only`) under its own cut, `pieces` per device for each of
/// `pieces`, Dask's, Legate's and automatic: one line `sweep <problem> <cut> <seconds> s
/// <ok|FAILED>` each. Returns 1 when a result differs from the reference.
int run_demo_sweep(const DemoOptions& options, const std::vector<int>& pieces);

struct AnnotateOptions {
  std::string annotation;
  std::vector<long long> threads, block, superblock;
  std::vector<std::string> arrays, consts;
};
int run_annotate(const AnnotateOptions& options);

/// Prints the run's ranks, their devices and memory (under mpirun: every rank's), and the
/// settings it runs with.
int run_info();
/// Prints the table of GRIDSPAN_* settings in Markdown.
int run_settings();

}  // namespace gridspan::cli
