// A lumen-server child process for the end-to-end tests: started on a free
// port, ready when /health says so, stopped with SIGTERM.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace lumen::server {

// A lumen-server child process; the port comes from its first stderr line.
struct ServerProcess {
  pid_t pid = -1;
  int port = 0;
  FILE* err = nullptr;

  std::string ready_line;  // "lumen-server: ready: ..." (context, threads, pack cache)
  std::string log;         // stderr up to the ready line

  // Starts lumen-server on MODEL.so (none when empty) with `args` (after the
  // model) on a free port.
  void start(const std::string& model_so, const std::vector<std::string>& args_after_model) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    std::vector<std::string> args = {LUMEN_BINARY_DIR "/tools/lumen-server"};
    if (!model_so.empty()) args.push_back(model_so);
    args.insert(args.end(), {"--port", "0"});
    args.insert(args.end(), args_after_model.begin(), args_after_model.end());
    pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      dup2(fds[1], 2);
      close(fds[0]);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(fds[1]);
    err = fdopen(fds[0], "r");
    char line[512];
    ASSERT_NE(fgets(line, sizeof line, err), nullptr);
    const std::string s = line;
    log = s;
    const auto colon = s.rfind(':');
    ASSERT_NE(s.find("listening on http://127.0.0.1:"), std::string::npos) << s;
    port = std::stoi(s.substr(colon + 1));
    // Ready when /health says so (it answers 503 while loading, and while it
    // compiles a model.so for the GGUF when none is given).
    httplib::Client c("127.0.0.1", port);
    for (int i = 0; i < 2400; ++i) {
      auto r = c.Get("/health");
      if (r && r->status == 200) {
        // The ready line follows the attach that turns /health to 200.
        while (fgets(line, sizeof line, err) != nullptr) {
          ready_line = line;
          log += ready_line;
          if (ready_line.find("lumen-server: ready: ") == 0) return;
        }
        FAIL() << "no ready line; last: " << ready_line;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    FAIL() << "the server never became ready";
  }

  // SIGTERM; returns the exit code (or -1 if it had to be killed).
  int terminate() {
    if (pid < 0) return -1;
    kill(pid, SIGTERM);
    int status = 0;
    for (int i = 0; i < 400; ++i) {
      if (waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        if (err) fclose(err);
        err = nullptr;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    pid = -1;
    return -1;
  }
};

}  // namespace lumen::server
