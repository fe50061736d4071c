from butler.cli import main

raise SystemExit(main())
