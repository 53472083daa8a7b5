"""The `kiwi` command installed by `pip install .`: the C++ command-line tool, run in-process, and
`kiwi profile`, which measures the device with PyTorch (kiwi/profile.py)."""
import sys

from kiwi import _kiwi


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["profile"]:
        from kiwi.profile import main as profile_main
        sys.exit(profile_main(argv[1:]))
    sys.stdout.flush()
    sys.exit(_kiwi.main(argv))


if __name__ == "__main__":
    main()
