//! A reader that goes away (`overture events ID | head -1`) ends the program quietly, as it ends
//! every Unix tool: by SIGPIPE, with no panic and nothing on stderr.

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;

use crate::support::{id_of, text, Overture};

#[test]
fn reading_commands_end_quietly_when_their_reader_has_gone() {
    let (o, file) = Overture::with_blueprint(
        "echo.yaml",
        "name: echo\nsteps:\n  say: { run: script, with: { command: 'seq 1 2000' } }\n",
    );
    let status = o.deploy_ok(&file, &[]);
    let id = id_of(&status);

    for args in [
        vec!["events", id.as_str(), "--json"],
        vec!["events", id.as_str()],
        vec!["status", id.as_str()],
        vec!["status", id.as_str(), "--json"],
        vec!["list"],
        vec!["logs", id.as_str(), "say"],
        vec!["graph", id.as_str()],
    ] {
        let mut child = o
            .command(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start overture");
        // The reader leaves before the first line is written, as `head -1` leaves after it.
        drop(child.stdout.take());
        let output = child.wait_with_output().expect("wait");
        assert_eq!(
            output.status.signal(),
            Some(libc::SIGPIPE),
            "{args:?}: {:?} {}",
            output.status,
            text(&output.stderr)
        );
        assert_eq!(text(&output.stderr), "", "{args:?}: quietly");
    }
}
