"""Activities: the side-effecting steps Berth's workflows run on workers."""
