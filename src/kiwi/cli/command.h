#pragma once
// Each subcommand lives in its own file and registers itself on the root app; `run` executes it
// after parsing and returns the exit code.
#include <CLI/CLI.hpp>
#include <functional>

namespace kiwi::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command AddGraphCommand(CLI::App& root);
Command AddSimulateCommand(CLI::App& root);
Command AddPlanCommand(CLI::App& root);
Command AddRematCommand(CLI::App& root);
Command AddIopddlCommand(CLI::App& root);
Command AddJointCommand(CLI::App& root);
Command AddHybridCommand(CLI::App& root);
Command AddProfileCommand(CLI::App& root);
Command AddSolversCommand(CLI::App& root);

}  // namespace kiwi::cli
