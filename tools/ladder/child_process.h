// One child process (zrt-train, or mpirun starting it) run to completion under a time limit,
// its stdout and stderr in a file. The child leads its own process group, so a timeout, or a
// SIGINT/SIGTERM to zrt-ladder, ends it and everything it started (mpirun's ranks) instead of
// leaving them running. One owner per child: the destructor ends and reaps a child still running.
// Thread-safety: one thread drives a ChildProcess; the interrupt flag is async-signal-safe.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace zrt::ladder {

struct ProcessResult {
  int exitCode = -1;      // valid when exited
  bool exited = false;    // ended by exit(), not by a signal
  int signal = 0;         // the signal that ended it, when not exited
  bool timedOut = false;  // we ended it at the time limit
  bool interrupted = false;  // we ended it because zrt-ladder was interrupted
  double seconds = 0;
  bool ok() const { return exited && exitCode == 0; }
  // "exit 2", "killed by signal 9", "timed out after 600 s", "interrupted".
  std::string describe() const;
};

class ChildProcess {
 public:
  // Starts argv[0] (looked up in PATH) with stdin from /dev/null and stdout and stderr appended
  // to `outputFile` (created, truncated). Throws IoError naming the command and file.
  ChildProcess(const std::vector<std::string>& argv, const std::string& outputFile);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Waits for the child to end, at most `limit`; past it (or on an interrupt) sends SIGTERM to
  // the child's group, then SIGKILL after `grace`, and reaps it.
  ProcessResult wait(std::chrono::milliseconds limit,
                     std::chrono::milliseconds grace = std::chrono::seconds(10));

 private:
  void endGroup(std::chrono::milliseconds grace);

  pid_t pid_ = -1;
  int status_ = 0;
  std::chrono::steady_clock::time_point start_;
};

// SIGINT and SIGTERM set a flag that ChildProcess::wait() polls, instead of ending zrt-ladder
// at once with its children still running.
void installInterruptHandlers();
bool interrupted();

// The whole of a command line, quoted where needed, for messages and the report.
std::string commandLine(const std::vector<std::string>& argv);

}  // namespace zrt::ladder
