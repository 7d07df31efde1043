from as2d.cli.app import entry

entry()
