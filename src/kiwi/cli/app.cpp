#include "kiwi/cli/app.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <vector>

#include "kiwi/cli/command.h"
#include "kiwi/cli/common.h"
#include "kiwi/util/one_line.h"
#include "kiwi/util/version.h"

namespace kiwi::cli {
namespace {

// A command's result only counts once its output is written: a full (/dev/full) or closed stdout is a
// failed run with one line on stderr (exit 2, as for an --out that cannot be written).
int CheckedOutput(int status) {
  errno = 0;
  std::cout.flush();
  const bool written = std::cout.good() && std::fflush(stdout) == 0 && !std::ferror(stdout);
  if (written || status != 0) return status;
  const int error = errno;
  return ReportError(BadInput(fmt::format("standard output: the result could not be written ({})",
                                          error != 0 ? std::strerror(error) : "closed or full")));
}

// CLI11 prints its own messages (help, version, errors); map its outcome onto the contract.
int HandleParseError(const CLI::App& app, const CLI::ParseError& e) {
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
    app.exit(e);  // --help / --version
    return CheckedOutput(0);
  }
  std::cerr << "kiwi: error: " << MessageLine(e.what()) << " (see kiwi --help)\n";
  return 2;
}

}  // namespace

int Main(int argc, char** argv) {
  CLI::App app{"kiwi: plans distributed training (sharding, rematerialization, parallelism) of a model "
               "on a cluster within a per-device memory budget."};
  app.set_version_flag("--version", std::string("kiwi ") + kVersion);
  app.require_subcommand(0, 1);
  std::vector<Command> commands = {AddPlanCommand(app), AddGraphCommand(app), AddSimulateCommand(app),
                                   AddRematCommand(app), AddIopddlCommand(app), AddHybridCommand(app),
                                   AddJointCommand(app), AddProfileCommand(app), AddSolversCommand(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return HandleParseError(app, e);
  }
  try {
    for (Command& c : commands)
      if (c.app->parsed()) return CheckedOutput(c.run());
    return CheckedOutput(commands.front().run());  // no subcommand: the main job (`kiwi plan` on its defaults)
  } catch (const std::exception& e) {
    return ReportError(Internal(fmt::format("internal error: {} (please report this)", e.what())));
  }
}

}  // namespace kiwi::cli
