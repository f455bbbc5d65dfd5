#include "les/bench/child.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>

#include "les/util/error.h"

namespace les::bench {

namespace {

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;  // the parent went away: nothing left to tell
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// The child's side: 'O' + payload or 'E' + message on the pipe, then _exit (no atexit handlers
// or stdio buffers of the parent run twice).
[[noreturn]] void child_main(int fd, const std::function<std::string()>& fn) {
  // An interrupt ends the measuring process at once (the parent may have a handler that lets it
  // clean up; the child must not inherit it and carry on).
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  std::string out;
  try {
    std::string payload = fn();
    out.reserve(payload.size() + 1);
    out.push_back('O');
    out.append(payload);
  } catch (const std::bad_alloc&) {
    out.assign("Eout of memory");
  } catch (const std::exception& e) {
    out.assign(1, 'E');
    out.append(e.what());
  } catch (...) {
    out.assign("Eunknown exception");
  }
  write_all(fd, out.data(), out.size());
  ::close(fd);
  std::fflush(stderr);
  ::_exit(0);
}

}  // namespace

ChildOutcome run_in_child(const std::function<std::string()>& fn) {
  int fds[2];
  if (::pipe(fds) != 0) throw Error(strfmt("pipe: %s", std::strerror(errno)));
  std::fflush(stdout);
  std::fflush(stderr);
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    throw Error(strfmt("fork: %s", std::strerror(e)));
  }
  if (pid == 0) {
    ::close(fds[0]);
    child_main(fds[1], fn);
  }
  ::close(fds[1]);
  std::string got;
  char buf[65536];
  for (;;) {
    const ssize_t r = ::read(fds[0], buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got.append(buf, static_cast<size_t>(r));
  }
  ::close(fds[0]);
  int status = 0;
  struct rusage ru {};
  pid_t w;
  do {
    w = ::wait4(pid, &status, 0, &ru);
  } while (w < 0 && errno == EINTR);
  ChildOutcome out;
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.peak_rss = static_cast<uint64_t>(ru.ru_maxrss) * 1024;
  if (w < 0) {
    out.error = strfmt("wait4: %s", std::strerror(errno));
  } else if (WIFSIGNALED(status)) {
    out.error = strfmt("the measuring process was killed by signal %d (%s)%s", WTERMSIG(status),
                       strsignal(WTERMSIG(status)), WTERMSIG(status) == SIGKILL ? ", perhaps out of memory" : "");
  } else if (got.empty()) {
    out.error = strfmt("the measuring process exited with status %d without a result", WEXITSTATUS(status));
  } else if (got[0] == 'O') {
    out.ok = true;
    out.payload = got.substr(1);
  } else {
    out.error = got.substr(1);
  }
  return out;
}

}  // namespace les::bench
