// NbdServer: an nbdkit process serving one file for a test, on a Unix
// socket in a temporary directory or on a free TCP port of 127.0.0.1, with
// optional filters (error, delay) and TLS-PSK; stopped (or killed, paused,
// restarted) by the test. NbdSkipReason() says why NBD tests cannot run
// here (no libnbd in this build, no nbdkit), or "".
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "dlfs/nbd.h"
#include "testutil.h"

namespace dlfs::testing {

inline std::string NbdkitPath() {
  for (const char* p :
       {"/usr/sbin/nbdkit", "/usr/bin/nbdkit", "/usr/local/sbin/nbdkit", "/usr/local/bin/nbdkit"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return "";
}

inline std::string NbdSkipReason() {
  if (!NbdSupported()) return "this dlfs was built without libnbd (install libnbd-dev)";
  if (NbdkitPath().empty()) return "nbdkit is not installed (apt-get install nbdkit)";
  return "";
}

// A TCP port on 127.0.0.1 that was free a moment ago.
inline int FreeTcpPort() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = -1;
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(s);
  return port;
}

class NbdServer {
 public:
  struct Options {
    bool tcp = false;                  // else a Unix socket
    bool read_only = true;             // nbdkit -r
    std::vector<std::string> filters;  // "error", "delay", ...
    std::vector<std::string> params;   // filter parameters, "error-rate=100%", ...
    std::string tls_psk;               // nbdkit --tls=require --tls-psk=FILE
  };

  // Serves `file`; `dir` holds the socket and pid file.
  NbdServer(std::string file, std::string dir, Options o)
      : file_(std::move(file)), dir_(std::move(dir)), o_(std::move(o)) {
    static int counter = 0;
    const std::string id = std::to_string(::getpid()) + "." + std::to_string(counter++);
    socket_ = dir_ + "/nbd." + id + ".sock";
    pidfile_ = dir_ + "/nbd." + id + ".pid";
    if (o_.tcp) port_ = FreeTcpPort();
  }
  ~NbdServer() { Stop(); }

  // Starts nbdkit and waits until it listens (it writes its pid file then).
  bool Start() {
    ::unlink(pidfile_.c_str());
    // Logs to stderr only when asked (the error filter logs every injection).
    std::vector<std::string> args = {NbdkitPath(), "-f", "--exit-with-parent", "-P", pidfile_};
    if (std::getenv("DLFS_NBDKIT_LOG") == nullptr) args.push_back("--log=null");
    if (o_.tcp) {
      args.insert(args.end(), {"-i", "127.0.0.1", "-p", std::to_string(port_)});
    } else {
      args.insert(args.end(), {"-U", socket_});
    }
    if (o_.read_only) args.push_back("-r");
    if (!o_.tls_psk.empty()) args.insert(args.end(), {"--tls=require", "--tls-psk=" + o_.tls_psk});
    for (const std::string& f : o_.filters) args.push_back("--filter=" + f);
    args.insert(args.end(), {"file", file_});
    args.insert(args.end(), o_.params.begin(), o_.params.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    // Until it listens or exits (30 s at most: a loaded machine starts it late).
    bool exited = false;
    const bool done = WaitUntil([&] {
      struct stat st;
      if (::stat(pidfile_.c_str(), &st) == 0 && st.st_size > 0) return true;
      int status;
      exited = ::waitpid(pid_, &status, WNOHANG) == pid_;
      return exited;
    });
    if (exited) pid_ = -1;
    return done && !exited;
  }

  void Kill(int sig = SIGKILL) {
    if (pid_ <= 0) return;
    if (sig == SIGSTOP) {
      ::kill(pid_, sig);
      return;
    }
    ::kill(pid_, SIGCONT);
    ::kill(pid_, sig);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    ::unlink(socket_.c_str());
  }
  void Stop() { Kill(SIGTERM); }

  // The URI libnbd connects to (with `query` appended, e.g. TLS options,
  // and `user` as the TLS identity).
  std::string uri(const std::string& query = "", const std::string& user = "") const {
    const std::string scheme = o_.tls_psk.empty() ? "nbd" : "nbds";
    const std::string who = user.empty() ? "" : user + "@";
    if (o_.tcp) {
      return scheme + "://" + who + "127.0.0.1:" + std::to_string(port_) + "/" +
             (query.empty() ? "" : "?" + query);
    }
    return scheme + "+unix://" + who + "/?socket=" + socket_ + (query.empty() ? "" : "&" + query);
  }
  pid_t pid() const { return pid_; }

 private:
  std::string file_, dir_;
  Options o_;
  std::string socket_, pidfile_;
  int port_ = -1;
  pid_t pid_ = -1;
};

}  // namespace dlfs::testing
