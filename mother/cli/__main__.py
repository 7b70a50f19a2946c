from mother.cli import main

main()
