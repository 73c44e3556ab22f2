from ptycho.cli import main

raise SystemExit(main())
