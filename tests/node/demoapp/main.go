// Command demoapp is the demo's application: it serves the value its pod was started
// with, from the MESSAGE environment variable, which a ConfigMap fills. An
// environment variable never changes in a running pod: the page changes only when
// the pod is replaced, which is what confighash is for.
package main

import (
	"fmt"
	"net/http"
	"os"
)

func main() {
	message := os.Getenv("MESSAGE")
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, message)
	})
	if err := http.ListenAndServe(":8080", nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
