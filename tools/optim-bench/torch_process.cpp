#include "tools/optim-bench/torch_process.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"

extern char** environ;

namespace zrt::bench {
namespace {

// Prints {"torch": version} once ready, then for each line "THREADS" on stdin sets the thread
// count, times one step and prints its seconds. The state is created by an untimed first step.
constexpr const char* kScript = R"PY(
import json, sys, time
try:
    import torch
except ImportError as err:
    sys.exit(f"cannot import torch ({err}): install Debian's python3-torch (scripts/install-deps.sh)")
kind, n = sys.argv[1], int(sys.argv[2])
p = torch.nn.Parameter(torch.empty(n).uniform_(-1, 1))
p.grad = torch.empty(n).uniform_(-1e-2, 1e-2)
cls = torch.optim.AdamW if kind == "adamw" else torch.optim.Adam
opt = cls([p], lr=1e-3, weight_decay=0.01, foreach=True)
opt.step()
print(json.dumps({"torch": torch.__version__}), flush=True)
for line in sys.stdin:
    torch.set_num_threads(int(line))
    t0 = time.perf_counter()
    opt.step()
    print(time.perf_counter() - t0, flush=True)
)PY";

}  // namespace

TorchProcess::TorchProcess(const std::string& python, const std::string& optimizer,
                           std::size_t params) {
  namespace fs = std::filesystem;
  script_ = (fs::temp_directory_path() / ("zrt_optim_bench_" + std::to_string(::getpid()) + ".py"))
                .string();
  {
    std::ofstream out(script_);
    out << kScript;
    out.close();
    if (!out) ZRT_THROW(Error, "zrt-optim-bench: cannot write the torch script '", script_, "'");
  }
  // A torch process that dies must surface as an error naming it, not end the bench by SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  const std::vector<std::string> args = {python, script_, optimizer, std::to_string(params)};
  command_ = args[0] + " " + args[1] + " " + args[2] + " " + args[3];
  int in[2], out[2];
  if (::pipe(in) != 0 || ::pipe(out) != 0)
    ZRT_THROW(Error, "zrt-optim-bench: cannot create pipes for `", command_, "`");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  for (int fd : {in[0], in[1], out[0], out[1]}) posix_spawn_file_actions_addclose(&actions, fd);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const int rc = ::posix_spawn(&pid_, python.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(in[0]);
  ::close(out[1]);
  toChild_ = ::fdopen(in[1], "w");
  fromChild_ = ::fdopen(out[0], "r");
  if (rc != 0) {
    pid_ = -1;
    ZRT_THROW(Error, "zrt-optim-bench: cannot start `", command_, "`: ", std::strerror(rc),
              "; point --python at an interpreter with torch, or pass --no-torch");
  }
  const std::string ready = readLine();
  try {
    version_ = nlohmann::json::parse(ready).at("torch").get<std::string>();
  } catch (const std::exception& e) {
    ZRT_THROW(Error, "zrt-optim-bench: cannot read torch's first line '", ready, "' from `",
              command_, "`: ", e.what());
  }
}

TorchProcess::~TorchProcess() {
  if (toChild_) std::fclose(toChild_);  // end of input: the script's loop ends
  if (fromChild_) std::fclose(fromChild_);
  if (pid_ > 0) {
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  std::error_code ignored;
  std::filesystem::remove(script_, ignored);
}

std::string TorchProcess::readLine() {
  std::string line;
  for (int c; (c = std::fgetc(fromChild_)) != EOF && c != '\n';)
    line.push_back(static_cast<char>(c));
  if (line.empty() && std::feof(fromChild_)) {
    int status = 0;
    if (pid_ > 0 && ::waitpid(pid_, &status, 0) == pid_) pid_ = -1;
    ZRT_THROW(Error, "zrt-optim-bench: torch run `", command_, "` ended early (exit status ",
              WIFEXITED(status) ? WEXITSTATUS(status) : -1,
              "; its error is above); install python3-torch (scripts/install-deps.sh), point "
              "--python at an interpreter with torch, or pass --no-torch");
  }
  return line;
}

double TorchProcess::step(int threads) {
  if (std::fprintf(toChild_, "%d\n", threads) < 0 || std::fflush(toChild_) != 0)
    ZRT_THROW(Error, "zrt-optim-bench: cannot write to torch run `", command_, "`");
  const std::string line = readLine();
  try {
    return std::stod(line);
  } catch (const std::exception&) {
    ZRT_THROW(Error, "zrt-optim-bench: torch run `", command_, "` printed '", line,
              "' where a step's seconds were expected");
  }
}

}  // namespace zrt::bench
