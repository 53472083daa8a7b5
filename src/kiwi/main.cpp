#include "kiwi/cli/app.h"

int main(int argc, char** argv) { return kiwi::cli::Main(argc, argv); }
