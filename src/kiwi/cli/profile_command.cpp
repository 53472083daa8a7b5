// `kiwi profile`: measuring a device needs PyTorch, so the C++ command runs the Python one
// (python/kiwi/profile.py) with the same arguments and returns its exit code. The Python package's
// `kiwi` command handles `profile` itself without coming here.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kiwi/cli/command.h"

extern char** environ;

namespace kiwi::cli {
namespace {

namespace fs = std::filesystem;

// This executable's directory (build/ in the CMake build), or empty.
fs::path ExecutableDir() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : self.parent_path();
}

// The interpreter: $KIWI_PYTHON, else the project's .venv next to the build directory, else python3.
std::string PythonInterpreter(const fs::path& exe_dir) {
  if (const char* chosen = std::getenv("KIWI_PYTHON"); chosen && *chosen) return chosen;
  std::error_code ec;
  const fs::path venv = exe_dir.parent_path() / ".venv" / "bin" / "python";
  if (!exe_dir.empty() && fs::exists(venv, ec)) return venv.string();
  return "python3";
}

int RunPythonProfile(const std::vector<std::string>& args) {
  const fs::path exe_dir = ExecutableDir();
  const std::string python = PythonInterpreter(exe_dir);
  // The CMake build puts the Python package in build/python: make it importable.
  std::error_code ec;
  if (!exe_dir.empty() && fs::exists(exe_dir / "python" / "kiwi" / "profile.py", ec)) {
    const char* old = std::getenv("PYTHONPATH");
    const std::string path = (exe_dir / "python").string() + (old && *old ? ":" + std::string(old) : "");
    setenv("PYTHONPATH", path.c_str(), 1);
  }
  std::vector<std::string> argv = {python, "-m", "kiwi.profile"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> raw;
  for (std::string& a : argv) raw.push_back(a.data());
  raw.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawnp(&pid, python.c_str(), nullptr, nullptr, raw.data(), environ) != 0) {
    fmt::print(stderr, "kiwi: error: profile: cannot run {} (set KIWI_PYTHON to a Python with PyTorch and kiwi)\n",
               python);
    return 2;
  }
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return 1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

}  // namespace

Command AddProfileCommand(CLI::App& root) {
  CLI::App* app = root.add_subcommand(
      "profile",
      "measure this machine's device with PyTorch (GEMMs, bandwidths, kernel and optimizer times, collectives) "
      "into a profile file for --profile (runs `python -m kiwi.profile`; options: kiwi profile --help)");
  app->allow_extras();
  app->set_help_flag();  // --help goes to the Python command, which knows the options
  return {app, [app] { return RunPythonProfile(app->remaining()); }};
}

}  // namespace kiwi::cli
