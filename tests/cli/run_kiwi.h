#pragma once
// Runs the built `kiwi` binary in a subprocess and captures exit code, stdout and stderr.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiwi::testing {

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
  nlohmann::json Json() const { return nlohmann::json::parse(out); }
};

inline std::string Slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// This test process's scratch directory, removed when the process exits (ctest runs each test in a
// process of its own: thousands of them would otherwise pile up in /tmp).
inline std::filesystem::path TempDir() {
  struct Scratch {
    std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("kiwi_cli_test_" + std::to_string(::getpid()));
    ~Scratch() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  };
  static const Scratch scratch;
  std::filesystem::create_directories(scratch.dir);
  return scratch.dir;
}

// `args` is appended to the binary path as is (quote paths yourself when needed).
inline RunResult RunKiwi(const std::string& args) {
  const auto dir = TempDir();
  const auto out = dir / "stdout.txt";
  const auto err = dir / "stderr.txt";
  const std::string cmd = std::string(KIWI_BINARY) + " " + args + " >" + out.string() + " 2>" + err.string();
  const int status = std::system(cmd.c_str());
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = Slurp(out);
  r.err = Slurp(err);
  return r;
}

// `token` quoted for the shell; a command line of such tokens.
inline std::string ShellQuote(const std::string& token) {
  std::string out = "'";
  for (char c : token) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

inline std::string CommandLine(const std::vector<std::string>& tokens) {
  std::string line;
  for (const std::string& t : tokens) line += (line.empty() ? "" : " ") + ShellQuote(t);
  return line;
}

// The lines of `text`, without their line breaks.
inline std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    lines.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return lines;
}

inline int CountLines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

}  // namespace kiwi::testing
