from shoal.cli.main import main

main()
