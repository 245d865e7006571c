from cdd_cli.cli import main

main()
