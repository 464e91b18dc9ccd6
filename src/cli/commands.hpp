// Subcommands of the `gridspan` program.
#pragma once

#include <string>
#include <vector>

namespace gridspan::cli {

struct DemoOptions {
  int scale = 1;
  std::string only;
};
int run_demo(const DemoOptions& options);

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
