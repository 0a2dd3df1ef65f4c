// Command assemble writes the parts of a release that release.sh cannot say in shell:
//
//	assemble image LAYOUT SBOMDIR REF   the image index ko wrote into the OCI layout
//	                                     LAYOUT, each platform's SBOM (SBOMDIR, as ko
//	                                     names them) attached to it as an attestation,
//	                                     and the layout's one entry named REF; prints
//	                                     the index's digest
//	assemble krew DIST VERSION URL      the krew plugin manifest of DIST's archives,
//	                                     downloaded from URL (the release page)
//	assemble chart CHARTYAML NOTES REF PLATFORMS
//	                                     Artifact Hub's annotations added to a chart's
//	                                     Chart.yaml: its changes from the release notes,
//	                                     its image and links
//	assemble provenance DIST VERSION COMMIT REF INDEX STARTED [TOOL=VERSION...]
//	                                     the in-toto statement (SLSA provenance v1) of
//	                                     every file of DIST and of the image index REF
//	                                     of digest INDEX
//
// It uses nothing beyond the standard library and sigs.k8s.io/yaml, so that a release
// needs only Go.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: assemble image|krew|chart|provenance ...")
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; {
	case cmd == "image" && len(args) == 3:
		var digest string
		if digest, err = attachSBOMs(args[0], args[1], args[2]); err == nil {
			fmt.Println(digest)
		}
	case cmd == "krew" && len(args) == 3:
		err = writeKrew(args[0], args[1], args[2])
	case cmd == "chart" && len(args) == 4:
		err = annotateChart(args[0], args[1], args[2], args[3])
	case cmd == "provenance" && len(args) >= 6:
		err = writeProvenance(args[0], args[1], args[2], args[3], args[4], args[5], args[6:])
	default:
		fail(fmt.Sprintf("assemble %s: unknown command or wrong arguments %q", cmd, args))
	}
	if err != nil {
		fail("assemble " + os.Args[1] + ": " + err.Error())
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(1)
}
