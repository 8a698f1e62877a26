package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/iosched/iosched/internal/paths"
	"github.com/iosched/iosched/internal/pipeline"
	"github.com/iosched/iosched/internal/probe"
	"github.com/iosched/iosched/internal/sysfs"
)

func newListCmd(e *env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [DEVICE...]",
		Short: "Show every whole disk: class, driver, queues, scheduler, NOWAIT, size",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			devs, skipped, err := e.readDevices(args, true)
			if err != nil {
				return err
			}
			if asJSON {
				fs, err := e.fs()
				if err != nil {
					return err
				}
				probes := map[string]*probe.Record{}
				for _, d := range devs {
					rec, err := rememberedFor(fs, e.stateDir, d)
					if err != nil {
						skipped = append(skipped, "probe results: "+err.Error())
						break
					}
					if rec != nil {
						probes[d.Name] = rec
					}
				}
				return writeJSON(e.stdout, struct {
					Devices []*sysfs.Device `json:"devices"`
					// Probes are the remembered probe results, by disk.
					Probes   map[string]*probe.Record `json:"probes,omitempty"`
					Warnings []string                 `json:"warnings"`
				}{devs, probes, append([]string{}, skipped...)})
			}
			if err := renderList(e.stdout, devs); err != nil {
				return err
			}
			if fs, err := e.fs(); err == nil {
				renderRemembered(e.stdout, fs, e.stateDir, devs)
			}
			for _, msg := range skipped {
				fmt.Fprintf(e.stdout, "warning: %s\n", printable(msg))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().StringVar(&e.stateDir, "state-dir", paths.Default.State, "where the daemon remembers probe results: each disk's is listed")
	return cmd
}

// readDevices reads the named disks, or every disk when names is empty:
// every fact, and NOWAIT when nowait, several disks at once. Named disks
// that cannot be read are an error (exit 1) naming each of them. When
// listing every disk, one that cannot be read (gone since the listing, a
// link loop, a link out of the tree) is skipped and said in skipped, so one
// bad entry never hides the others.
func (e *env) readDevices(names []string, nowait bool) (devs []*sysfs.Device, skipped []string, err error) {
	pipe, err := e.pipeline()
	if err != nil {
		return nil, nil, err
	}
	fs := pipe.FS
	all := len(names) == 0
	if all {
		if names, err = fs.Disks(); err != nil {
			return nil, nil, err
		}
	}
	names = dedupe(names)
	read := make([]*sysfs.Device, len(names))
	errs := make([]error, len(names))
	sc := pipeline.Everything()
	sc.NoWait = nowait
	concurrently(len(names), readLimit(), func(i int) {
		disk, err := fs.OpenDisk(names[i])
		if err != nil {
			errs[i] = err
			return
		}
		read[i], errs[i] = pipe.Read(disk, sc, sysfs.Ident{}, nil)
		disk.Close()
	})
	devs = make([]*sysfs.Device, 0, len(names))
	var missing []string
	for i, d := range read {
		switch {
		case errs[i] == nil:
			devs = append(devs, d)
		case all: // sysfs errors name the device already
			skipped = append(skipped, "skipped: "+errs[i].Error())
		default:
			missing = append(missing, printableLines(errs[i].Error()))
		}
	}
	if len(missing) > 0 {
		return nil, nil, &ExitError{Code: 1, Msg: strings.Join(missing, "\niosched: ")}
	}
	return devs, skipped, nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// renderList prints the aligned table, then per device what could not be
// read, then why NOWAIT is unknown, so a "?" in the table is never
// unexplained.
func renderList(w io.Writer, devs []*sysfs.Device) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tCLASS\tDRIVER\tROT\tHWQ\tSCHEDULER\tNOWAIT\tSIZE\tMODEL")
	for _, d := range devs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			printable(d.Name), d.Class, printable(orDash(driverColumn(d))), optBool(d.Rotational), optInt(d.HWQueues),
			printable(schedulerColumn(d)), optBool(d.NoWait), humanSize(d.SizeBytes), printable(orDash(modelColumn(d))))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, d := range devs {
		for _, msg := range d.Errors {
			fmt.Fprintf(w, "%s: warning: %s\n", printable(d.Name), printable(msg))
		}
		if m := missingFiles(d); m != "" {
			fmt.Fprintf(w, "%s: unknown: %s\n", printable(d.Name), printable(m))
		}
	}
	for _, d := range devs {
		if d.NoWait != nil && !*d.NoWait {
			fmt.Fprintf(w, "%s: no NOWAIT: %s\n", printable(d.Name), noWaitMeans)
		}
	}
	for _, g := range nowaitUnknown(devs) {
		switch {
		case len(g.names) == 1:
			fmt.Fprintf(w, "%s: nowait unknown: %s\n", printable(g.names[0]), printable(g.reason))
		case len(g.names) == len(devs):
			fmt.Fprintf(w, "nowait unknown for every disk: %s\n", printable(g.pattern))
		default:
			fmt.Fprintf(w, "nowait unknown for %s: %s\n", printable(strings.Join(g.names, ", ")), printable(g.pattern))
		}
	}
	return nil
}

// noWaitMeans is what a disk without NOWAIT costs: io_uring submits every
// read with REQ_NOWAIT, the driver refuses it (-EAGAIN/-EOPNOTSUPP inside
// the kernel), and io_uring re-issues it from an io-wq worker thread
// (io_uring/rw.c io_read, io_uring/io_uring.c io_queue_async).
const noWaitMeans = "io_uring hands every read to an io-wq worker thread, a slow path"

type nowaitGroup struct {
	pattern string // the reason with the disk's name as <disk>
	reason  string // the first disk's own reason
	names   []string
}

// nowaitUnknown groups the disks whose NOWAIT probe could not tell by reason,
// so that a directory without device nodes (a container, --dev elsewhere)
// is said once rather than once per disk.
func nowaitUnknown(devs []*sysfs.Device) []*nowaitGroup {
	var groups []*nowaitGroup
	byPattern := map[string]*nowaitGroup{}
	for _, d := range devs {
		if d.NoWait != nil || d.NoWaitReason == "" {
			continue
		}
		pattern := strings.ReplaceAll(d.NoWaitReason, d.Name, "<disk>")
		g, ok := byPattern[pattern]
		if !ok {
			g = &nowaitGroup{pattern: pattern, reason: d.NoWaitReason}
			byPattern[pattern] = g
			groups = append(groups, g)
		}
		g.names = append(g.names, d.Name)
	}
	return groups
}

// driverColumn is the driver, with the SCSI host's or NVMe controller's
// transport after a slash: "sd/virtio_scsi", "nvme/tcp". An unknown driver
// is "" (shown "-") whatever the transport.
func driverColumn(d *sysfs.Device) string {
	if d.Transport == "" || d.Driver == "" {
		return d.Driver
	}
	return d.Driver + "/" + d.Transport
}

// schedulerColumn is the active scheduler; "-" on a bio-based disk, which has
// none to set, and "?" when the scheduler file could not be read or parsed.
func schedulerColumn(d *sysfs.Device) string {
	switch {
	case d.Scheduler != nil:
		return *d.Scheduler
	case d.BioBased():
		return "-"
	default:
		return "?"
	}
}

// modelColumn is the model; a device-mapper disk has none, so its map name
// stands there instead (what dmsetup and multipath -ll show).
func modelColumn(d *sysfs.Device) string {
	if d.Model == "" && d.DMName != "" {
		if d.Multipath {
			return d.DMName + " (multipath)"
		}
		return d.DMName
	}
	return d.Model
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// missingFiles words the facts read as unknown because their file is not
// in the tree ("hw_queues (mq/), scheduler (queue/scheduler) missing"), so
// a "?" in the table is never unexplained; "" when none.
func missingFiles(d *sysfs.Device) string {
	if len(d.Missing) == 0 {
		return ""
	}
	facts := make([]string, 0, len(d.Missing))
	for f := range d.Missing {
		facts = append(facts, f)
	}
	sort.Strings(facts)
	parts := make([]string, len(facts))
	for i, f := range facts {
		parts[i] = fmt.Sprintf("%s (%s)", f, d.Missing[f])
	}
	return strings.Join(parts, ", ") + " missing from the tree"
}

func optInt(n *int) string {
	if n == nil {
		return "?"
	}
	return strconv.Itoa(*n)
}

func optBool(b *bool) string {
	switch {
	case b == nil:
		return "?"
	case *b:
		return "yes"
	default:
		return "no"
	}
}

// humanSize prints binary units with one decimal where it matters: 256G,
// 1.5T, 0B.
func humanSize(n *uint64) string {
	if n == nil {
		return "?"
	}
	v := float64(*n)
	units := []string{"B", "K", "M", "G", "T", "P", "E"}
	i := 0
	// A value that rounds to 1024 of a unit is 1 of the next, as lsblk
	// prints it: 1073741312 bytes (512 short of 1 GiB) is 1G, not 1024M.
	for (v >= 1024 || math.Round(v*10)/10 >= 1024) && i < len(units)-1 {
		v /= 1024
		i++
	}
	s := strconv.FormatFloat(v, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0")
	return s + units[i]
}
