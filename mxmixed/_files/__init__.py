"""Reading and writing files safely: atomic writes, files from someone else, signals held
during renames. Private to mxmixed."""
