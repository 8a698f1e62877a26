package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/iosched/iosched/devnode"
	"github.com/iosched/iosched/sysfs"
)

func newListCmd(e *env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [DEVICE...]",
		Short: "Show every whole disk: class, driver, queues, scheduler, NOWAIT, size",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			devs, err := e.readDevices(args, true)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(e.stdout, struct {
					Devices []*sysfs.Device `json:"devices"`
				}{devs})
			}
			return renderList(e.stdout, devs)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// readDevices reads the named disks, or every disk when names is empty. A
// named disk that does not exist is an error (exit 1) naming it.
func (e *env) readDevices(names []string, nowait bool) ([]*sysfs.Device, error) {
	fs, err := e.fs()
	if err != nil {
		return nil, err
	}
	all := len(names) == 0
	if all {
		if names, err = fs.Disks(); err != nil {
			return nil, err
		}
	}
	devs := make([]*sysfs.Device, 0, len(names))
	for _, n := range names {
		d, err := fs.Device(n)
		if err != nil {
			if all && sysfs.Gone(err) {
				continue // removed since it was listed
			}
			return nil, &ExitError{Code: 1, Msg: fmt.Sprintf("device %s: %v", n, err)}
		}
		if nowait {
			devnode.Fill(e.devDir, d)
		}
		devs = append(devs, d)
	}
	return devs, nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func renderList(w io.Writer, devs []*sysfs.Device) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tCLASS\tDRIVER\tROT\tHWQ\tSCHEDULER\tNOWAIT\tSIZE\tMODEL")
	for _, d := range devs {
		sched := "-"
		if d.Scheduler != nil {
			sched = *d.Scheduler
		}
		model := d.Model
		if model == "" {
			model = "-"
		}
		driver := d.Driver
		if d.Transport != "" {
			driver += "/" + d.Transport
		}
		if driver == "" {
			driver = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n",
			d.Name, d.Class, driver, optBool(d.Rotational), d.HWQueues, sched,
			optBool(d.NoWait), humanSize(d.SizeBytes), model)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, d := range devs {
		for _, msg := range d.Errors {
			fmt.Fprintf(w, "%s: warning: %s\n", d.Name, msg)
		}
	}
	return nil
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
// 1.5T, 0.
func humanSize(n *uint64) string {
	if n == nil {
		return "?"
	}
	v := float64(*n)
	units := []string{"B", "K", "M", "G", "T", "P", "E"}
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	s := strconv.FormatFloat(v, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0")
	return s + units[i]
}
