// The `gridspan` program: `gridspan demo` runs the demo problems on the embedded default;
// `gridspan annotate` shows the access regions an annotation gives every superblock;
// `gridspan info` shows the workers, devices, memory and settings a run gets; `gridspan
// settings` prints the table of settings.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/commands.hpp"
#include "gridspan/core/error.hpp"
#include "gridspan/gridspan.hpp"

int main(int argc, char** argv) {
  CLI::App app{"gridspan: one CUDA-style kernel launch spread over many devices"};
  app.require_subcommand(1);

  gridspan::cli::DemoOptions demo;
  auto* demo_cmd = app.add_subcommand("demo",
                                      "run the demo problems (stencil, HotSpot, K-means, GEMM) "
                                      "with spilling, each checked against a plain C++ reference");
  demo_cmd->add_option("--scale", demo.scale, "problem size factor (1 = default)")
      ->check(CLI::Range(1, 64));
  demo_cmd->add_option("--only", demo.only,
                       "run only this problem (stencil, hotspot, kmeans, gemm)");

  gridspan::cli::AnnotateOptions ann;
  auto* ann_cmd = app.add_subcommand("annotate",
                                     "print each superblock's thread range and the access "
                                     "region and mode of each array");
  ann_cmd
      ->add_option("annotation", ann.annotation,
                   "the annotation, e.g. \"global i => read in[i-1:i+1]\"")
      ->required();
  ann_cmd->add_option("--threads", ann.threads, "thread domain X[,Y[,Z]]")
      ->required()
      ->delimiter(',');
  ann_cmd->add_option("--block", ann.block, "block size X[,Y[,Z]]")->required()->delimiter(',');
  ann_cmd->add_option("--superblock", ann.superblock, "threads per superblock X[,Y[,Z]]")
      ->required()
      ->delimiter(',');
  ann_cmd->add_option("--array", ann.arrays,
                      "an array and its shape: NAME=D0[,D1[,D2]], or NAME=[] for a 0-d array "
                      "(repeatable)");
  ann_cmd->add_option("--const", ann.consts, "a constant: NAME=VALUE (repeatable)");

  auto* info_cmd = app.add_subcommand(
      "info", "show the workers (MPI ranks), their devices and memory, as gridspan sees them");

  auto* settings_cmd = app.add_subcommand(
      "settings", "print the table of GRIDSPAN_* settings (Markdown, as in the README)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (*demo_cmd) return gridspan::run_program([&] { return gridspan::cli::run_demo(demo); });
    if (*ann_cmd) return gridspan::cli::run_annotate(ann);
    if (*info_cmd) return gridspan::cli::run_info();
    if (*settings_cmd) return gridspan::cli::run_settings();
  } catch (const gridspan::AnnotationError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const gridspan::Error& e) {
    std::fprintf(stderr, "gridspan error: %s\n", e.what());
    return 2;
  }
  return 0;
}
