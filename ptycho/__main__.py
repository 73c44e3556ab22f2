from ptycho.runtime import bind_command_to_parent

bind_command_to_parent()  # first: no orphan even if the parent dies during the imports below

from ptycho.cli import main  # noqa: E402

raise SystemExit(main())
