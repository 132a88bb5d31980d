from shoal.cli.entry import main

main()
