#include "tools/ladder/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cerrno>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "core/log.h"

extern char** environ;

namespace zrt::ladder {

namespace {

volatile std::sig_atomic_t gInterrupted = 0;

extern "C" void onInterrupt(int) { gInterrupted = 1; }

// How often wait() looks at the child: short next to a trainer run, long next to a syscall.
constexpr auto kPoll = std::chrono::milliseconds(20);

}  // namespace

void installInterruptHandlers() {
  struct sigaction sa {};
  sa.sa_handler = onInterrupt;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

bool interrupted() { return gInterrupted != 0; }

std::string commandLine(const std::vector<std::string>& argv) {
  std::string s;
  for (const std::string& a : argv) {
    if (!s.empty()) s += ' ';
    const bool plain = !a.empty() && a.find_first_of(" \t\"'\\$`*?[]{}()<>|&;") == std::string::npos;
    if (plain) {
      s += a;
      continue;
    }
    s += '\'';
    for (char c : a) s += c == '\'' ? std::string("'\\''") : std::string(1, c);
    s += '\'';
  }
  return s;
}

std::string ProcessResult::describe() const {
  if (interrupted) return "interrupted";
  if (timedOut) return detail::cat("timed out after ", static_cast<long long>(seconds), " s");
  if (exited) return detail::cat("exit ", exitCode);
  return detail::cat("killed by signal ", signal, " (", strsignal(signal), ")");
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::string& outputFile) {
  ZRT_ENFORCE(!argv.empty(), "no command");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, outputFile.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own process group (pgid = its pid), so the whole tree can be signalled at once.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  start_ = std::chrono::steady_clock::now();
  const int rc = ::posix_spawnp(&pid_, argv[0].c_str(), &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    pid_ = -1;
    ZRT_THROW(IoError, "cannot start `", commandLine(argv), "` (output to ", outputFile, "): ", std::strerror(rc));
  }
}

ChildProcess::~ChildProcess() {
  if (pid_ <= 0) return;
  try {
    endGroup(std::chrono::seconds(5));
  } catch (const std::exception& e) {
    logError(std::string("zrt-ladder: ending a child process: ") + e.what());
  }
}

void ChildProcess::endGroup(std::chrono::milliseconds grace) {
  if (pid_ <= 0) return;
  ::kill(-pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  // Waits for the group leader to go after SIGTERM, at most `grace`; then SIGKILL, which cannot
  // be ignored, so the final waitpid returns.
  while (std::chrono::steady_clock::now() < deadline) {
    const pid_t r = ::waitpid(pid_, &status_, WNOHANG);
    if (r == pid_ || (r < 0 && errno != EINTR)) {
      ::kill(-pid_, SIGKILL);  // ranks mpirun may have left behind
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(kPoll);
  }
  ::kill(-pid_, SIGKILL);
  while (::waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

ProcessResult ChildProcess::wait(std::chrono::milliseconds limit, std::chrono::milliseconds grace) {
  ProcessResult r;
  const auto deadline = start_ + limit;
  // Waits for the child to exit, polling so that the time limit and an interrupt are seen.
  while (pid_ > 0) {
    const pid_t w = ::waitpid(pid_, &status_, WNOHANG);
    if (w == pid_) {
      pid_ = -1;
      break;
    }
    if (w < 0 && errno != EINTR)
      ZRT_THROW(IoError, "waitpid(", pid_, "): ", std::strerror(errno));
    if (interrupted()) {
      r.interrupted = true;
      endGroup(grace);
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      r.timedOut = true;
      endGroup(grace);
      break;
    }
    std::this_thread::sleep_for(kPoll);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (WIFEXITED(status_)) {
    r.exited = true;
    r.exitCode = WEXITSTATUS(status_);
  } else if (WIFSIGNALED(status_)) {
    r.signal = WTERMSIG(status_);
  }
  return r;
}

}  // namespace zrt::ladder
