from sglang_eagle_sizing.cli import main

raise SystemExit(main())
