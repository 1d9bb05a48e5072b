from conveyor_cli.app import main

main()
