from trimerge.cli import main

main()
