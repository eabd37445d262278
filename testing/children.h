// Test ranks in child processes: a rank that initialises UCX must not be
// the process that later forks the other tests' ranks, so every live
// test runs its ranks in children of its own.

#ifndef RESHARD_TESTING_CHILDREN_H_
#define RESHARD_TESTING_CHILDREN_H_

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace reshard::testing {

// Runs body(0), ..., body(count - 1) each in a child process at once and
// returns what each wrote back (empty for a child that died first).
inline std::vector<std::string> InChildren(
    uint32_t count, const std::function<std::string(uint32_t)>& body) {
  std::vector<int> reads(count);
  std::vector<pid_t> pids(count);
  for (uint32_t r = 0; r < count; ++r) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe");
    pids[r] = ::fork();
    if (pids[r] == 0) {
      ::close(fds[0]);
      const std::string out = body(r);
      (void)!::write(fds[1], out.data(), out.size());
      std::_Exit(0);
    }
    ::close(fds[1]);
    reads[r] = fds[0];
  }
  std::vector<std::string> out(count);
  for (uint32_t r = 0; r < count; ++r) {
    char buf[4096];
    ssize_t n;
    while ((n = ::read(reads[r], buf, sizeof buf)) > 0) out[r].append(buf, n);
    ::close(reads[r]);
    int status = 0;
    ::waitpid(pids[r], &status, 0);
  }
  return out;
}

// Runs `f` in one child process and returns what it wrote.
inline std::string InChild(const std::function<std::string()>& f) {
  return InChildren(1, [&](uint32_t) { return f(); })[0];
}

// Writes `s` to the pipe `fd`, its length first, for ReadMessage.
inline void WriteMessage(int fd, const std::string& s) {
  const uint64_t n = s.size();
  (void)!::write(fd, &n, sizeof n);
  (void)!::write(fd, s.data(), s.size());
}

// Reads one WriteMessage string from `fd`; empty when the writer died
// first.
inline std::string ReadMessage(int fd) {
  uint64_t n = 0;
  if (::read(fd, &n, sizeof n) != sizeof n) return "";
  std::string s(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, s.data() + got, n - got);
    if (r <= 0) return "";
    got += static_cast<size_t>(r);
  }
  return s;
}

}  // namespace reshard::testing

#endif  // RESHARD_TESTING_CHILDREN_H_
