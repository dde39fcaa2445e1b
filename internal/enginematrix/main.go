package main

import (
	_ "github.com/testcontainers/testcontainers-go"
	_ "github.com/testcontainers/testcontainers-go/modules/cockroachdb"
)

func main() {}
