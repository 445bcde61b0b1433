"""The stream table's changelog: log positions, round plans and the one lake-write path."""
