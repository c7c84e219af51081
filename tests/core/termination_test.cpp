// Termination hooks (core/termination.h): on SIGTERM and SIGINT the report hooks run, then the
// cleanup hooks, and the process still ends by the signal; a direct runTerminationHooks(0)
// (before a deliberate abort) runs them too, the report hooks only once per process. Each case
// runs in a forked child, which writes what ran into a pipe.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "core/termination.h"

namespace {

int gPipe = -1;

void note(char c) noexcept {
  const ssize_t ignored = ::write(gPipe, &c, 1);
  (void)ignored;
}
void reportA(int sig) noexcept { note(sig == SIGTERM ? 'T' : sig == SIGINT ? 'I' : '0'); }
void reportB(int) noexcept { note('b'); }
void cleanup(int) noexcept { note('c'); }

// Runs `body` in a child with the hooks added; returns what the hooks wrote and the status.
std::pair<std::string, int> inChild(void (*body)()) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    gPipe = fds[1];
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGINT, SIG_DFL);
    zrt::addTerminationHook(zrt::TerminationPhase::Cleanup, cleanup);
    zrt::addTerminationHook(zrt::TerminationPhase::Report, reportA);
    zrt::addTerminationHook(zrt::TerminationPhase::Report, reportB);
    zrt::addTerminationHook(zrt::TerminationPhase::Report, reportA);  // once only
    body();
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char c;
  while (::read(fds[0], &c, 1) == 1) out += c;
  ::close(fds[0]);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return {out, status};
}

}  // namespace

TEST_CASE("SIGTERM and SIGINT run the report hooks, then the cleanup hooks, and still end the process") {
  auto [term, termStatus] = inChild([] { ::raise(SIGTERM); });
  CHECK(term == "Tbc");
  CHECK(WIFSIGNALED(termStatus));
  if (WIFSIGNALED(termStatus)) CHECK(WTERMSIG(termStatus) == SIGTERM);
  auto [intr, intStatus] = inChild([] { ::raise(SIGINT); });
  CHECK(intr == "Ibc");
  CHECK(WIFSIGNALED(intStatus));
  if (WIFSIGNALED(intStatus)) CHECK(WTERMSIG(intStatus) == SIGINT);
}

TEST_CASE("a deliberate abort runs the hooks; a later signal runs only the cleanup again") {
  auto [out, status] = inChild([] {
    zrt::runTerminationHooks(0);
    ::raise(SIGTERM);
  });
  CHECK(out == "0bcc");
  CHECK(WIFSIGNALED(status));
}

TEST_CASE("an ignored signal is left alone") {
  auto [out, status] = inChild([] {
    ::signal(SIGINT, SIG_IGN);
    zrt::installTerminationHandler();
    ::raise(SIGINT);
  });
  CHECK(out.empty());
  CHECK(WIFEXITED(status));
}
