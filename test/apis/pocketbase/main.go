// Command pocketbase is PocketBase as its documentation shows it embedded
// in a Go program, with nothing added: the end-to-end tests (make
// e2e-apis) build it from the Go module proxy and run it on a loopback
// port.
package main

import (
	"log"

	"github.com/pocketbase/pocketbase"
)

func main() {
	if err := pocketbase.New().Start(); err != nil {
		log.Fatal(err)
	}
}
