from specscribe.cli import main

raise SystemExit(main())
