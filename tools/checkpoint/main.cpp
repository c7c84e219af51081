// zrt-ckpt: the checkpoint tool (docs/checkpoint.md).
//   zrt-ckpt inspect DIR [--tag T | --all]   the manifest summary, sizes per state
//   zrt-ckpt verify  DIR [--tag T | --all]   re-checks every file's checksum, names each bad one
//   zrt-ckpt export  DIR [--tag T] --out FILE [--dtype fp32|fp16|bf16] [--merge]
//   zrt-ckpt export  DIR [--tag T] --out ADAPTER_DIR --trainable-only [--dtype ...]
//                                            the whole model as one safetensors file; the base
//                                            with LoRA adapters folded in; or only the trainable
//                                            tensors (a LoRA adapter, PEFT's directory layout)
// DIR is one checkpoint (<dir>/<tag>) or a directory of them (then --tag, default its latest).
// Exit 0; 1 when a checkpoint fails verification or on an I/O error; 2 on bad input.
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"Inspect, verify and export ZRT checkpoints."};
  app.require_subcommand(1);
  std::string path, tag, dtype = "fp32";
  bool all = false;
  zrt::ckpt_tool::ExportOptions ex;
  auto where = [&](CLI::App* c, bool allowAll) {
    c->add_option("DIR", path, "a checkpoint, or a directory of checkpoints")->required();
    auto* t = c->add_option("--tag", tag, "the checkpoint in DIR (default: the one DIR/latest names)");
    if (allowAll) c->add_flag("--all", all, "every checkpoint in DIR")->excludes(t);
  };
  CLI::App* inspect = app.add_subcommand("inspect", "manifest summary and sizes per state");
  where(inspect, true);
  CLI::App* verify = app.add_subcommand("verify", "re-check every file's xxh3 checksum");
  where(verify, true);
  CLI::App* exp = app.add_subcommand("export", "consolidate the model into one safetensors file");
  where(exp, false);
  exp->add_option("--out", ex.out,
                  "the safetensors file to write; with --trainable-only, the adapter directory "
                  "(created if absent)")
      ->required();
  exp->add_option("--dtype", dtype, "dtype of the exported tensors")->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
  auto* trainable = exp->add_flag("--trainable-only", ex.trainableOnly,
                                  "only the trainable parameters: PEFT's adapter directory "
                                  "(adapter_model.safetensors, adapter_config.json)");
  exp->add_flag("--merge", ex.merge,
                "the base model with its LoRA adapters folded in (W + alpha/r (B A), in the base's layout), adapters "
                "omitted")
      ->excludes(trainable);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "zrt-ckpt: " << e.what() << " (see --help)\n";
    return 2;
  }
  try {
    if (inspect->parsed()) return zrt::ckpt_tool::inspect(path, tag, all);
    if (verify->parsed()) return zrt::ckpt_tool::verify(path, tag, all);
    ex.dtype = zrt::parseDType(dtype);
    return zrt::ckpt_tool::exportSafetensors(path, tag, ex);
  } catch (const zrt::InvalidArgument& e) {
    std::cerr << "zrt-ckpt: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "zrt-ckpt: " << e.what() << "\n";
    return 1;
  }
}
