#include "kiwi/util/result.h"

namespace kiwi {

int ExitCodeFor(ErrorCode code) {
  switch (code) {
    case ErrorCode::kBadInput: return 2;
    case ErrorCode::kInfeasible: return 3;
    case ErrorCode::kTimeLimit: return 4;
    case ErrorCode::kInternal: return 1;
  }
  return 1;
}

}  // namespace kiwi
