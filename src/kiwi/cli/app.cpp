#include "kiwi/cli/app.h"

#include <fmt/format.h>

#include <iostream>
#include <vector>

#include "kiwi/cli/command.h"
#include "kiwi/cli/common.h"
#include "kiwi/util/version.h"

namespace kiwi::cli {
namespace {

// CLI11 prints its own messages (help, version, errors); map its outcome onto the contract.
int HandleParseError(const CLI::App& app, const CLI::ParseError& e) {
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
    app.exit(e);  // --help / --version
    return 0;
  }
  std::string what = e.what();
  for (char& c : what)
    if (c == '\n') c = ' ';
  std::cerr << "kiwi: error: " << what << " (see kiwi --help)\n";
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
                                   AddJointCommand(app), AddProfileCommand(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return HandleParseError(app, e);
  }
  try {
    for (Command& c : commands)
      if (c.app->parsed()) return c.run();
    return commands.front().run();  // no subcommand: the main job (`kiwi plan` on its defaults)
  } catch (const std::exception& e) {
    return ReportError(Internal(fmt::format("internal error: {} (please report this)", e.what())));
  }
}

}  // namespace kiwi::cli
