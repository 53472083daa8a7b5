#pragma once
// The `kiwi` command (CONTRACT.md). One file per subcommand registers itself with the app.
namespace kiwi::cli {

// Parses argv, runs the subcommand and returns the process exit code (0, 2, 3, 4; 1 on a bug).
int Main(int argc, char** argv);

}  // namespace kiwi::cli
