// zrt-config FILE [--world-size N] [--micro-batch N] [--grad-accum N] [--train-batch N] [--fp16]
// [--bf16]: loads a DeepSpeed config the way the Engine does, prints the resolved config as JSON
// with every default filled in, then how "auto" and absent values were resolved and which keys
// ZRT accepts without acting on them. Exit 0; on bad input or a bad flag, the error and exit 2;
// 1 for anything else (an internal error).
#include <cstdint>
#include <iostream>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/config/config.h"

int main(int argc, char** argv) {
  CLI::App app{"Load a DeepSpeed JSON config as ZRT reads it and print it resolved."};
  std::string file;
  int worldSize = 1;
  std::optional<std::int64_t> micro, accum, train;
  bool fp16 = false, bf16 = false;
  app.add_option("FILE", file, "DeepSpeed JSON config")->required();
  app.add_option("--world-size", worldSize, "number of ranks (data-parallel world size)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--micro-batch", micro, "train_micro_batch_size_per_gpu where the file says auto")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  app.add_option("--grad-accum", accum, "gradient_accumulation_steps where the file says auto")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  app.add_option("--train-batch", train, "train_batch_size where the file says auto")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  app.add_flag("--fp16", fp16, "turn fp16 on where the file says auto");
  app.add_flag("--bf16", bf16, "turn bf16 on where the file says auto");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "zrt-config: " << e.what() << " (see --help)\n";
    return 2;
  }

  zrt::ConfigOverrides overrides;
  overrides.train_micro_batch_size_per_gpu = micro;
  overrides.gradient_accumulation_steps = accum;
  overrides.train_batch_size = train;
  if (fp16) overrides.fp16 = true;
  if (bf16) overrides.bf16 = true;
  try {
    zrt::Config config = zrt::loadConfig(file, worldSize, overrides);
    std::cout << zrt::toJson(config).dump(2) << "\n" << zrt::describe(config);
  } catch (const zrt::InvalidArgument& e) {
    std::cerr << "zrt-config: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    // Not the input's fault (out of memory, a bug): say so rather than abort in terminate().
    std::cerr << "zrt-config: internal error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
