//! The man pages in `docs/man/`: one per command and subcommand, generated from the very clap
//! definitions the program parses with ([`Cli`]), so they never drift from the commands. The
//! test fails, naming each page, when the committed pages differ from what the definitions
//! generate; `OVERTURE_BLESS=1 cargo test -p overture --bins man_pages` writes them again.
//! Hidden commands (the programs run inside a sandbox, `cloud serve`) get no page.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::CommandFactory;

use crate::app::Cli;

/// Where the pages are kept, from the repository's root.
const MAN_DIR: &str = "docs/man";

/// Every page, by file name (`overture.1`, `overture-deploy.1`, `overture-cloud-up.1`, ...).
fn pages() -> BTreeMap<String, Vec<u8>> {
    // Built once from the top, as the program parses: each subcommand gets its full name
    // (`overture-cloud-up`) and the global options it inherits.
    let mut cli = without_help(Cli::command());
    cli.build();
    let mut pages = BTreeMap::new();
    add_pages(&cli, &mut pages);
    pages
}

/// `command` without the `help` subcommand clap adds to every command with subcommands: it
/// says what `--help` says, and a page listing it would point to a page that is not there.
fn without_help(command: clap::Command) -> clap::Command {
    command
        .disable_help_subcommand(true)
        .mut_subcommands(without_help)
}

/// Adds the page of `command` and of each of its visible subcommands, all the way down.
fn add_pages(command: &clap::Command, pages: &mut BTreeMap<String, Vec<u8>>) {
    let man = clap_mangen::Man::new(command.clone());
    let mut page = Vec::new();
    man.render(&mut page)
        .expect("a man page renders into memory");
    pages.insert(man.get_filename(), page);
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        add_pages(sub, pages);
    }
}

fn man_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(MAN_DIR)
}

/// The pages committed in `dir`, by file name.
fn committed(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "1"))
        .map(|path| {
            let name = path
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read(&path).unwrap_or_default();
            (name, text)
        })
        .collect()
}

/// Writes `pages` into `dir`, and removes the pages of commands that are gone.
fn bless(dir: &Path, pages: &BTreeMap<String, Vec<u8>>) {
    std::fs::create_dir_all(dir).expect("docs/man can be made");
    for name in committed(dir)
        .keys()
        .filter(|name| !pages.contains_key(*name))
    {
        std::fs::remove_file(dir.join(name)).expect("a stale page can be removed");
    }
    for (name, page) in pages {
        std::fs::write(dir.join(name), page).expect("a page can be written");
    }
}

#[test]
fn the_man_pages_are_the_commands() {
    let dir = man_dir();
    let pages = pages();
    if std::env::var("OVERTURE_BLESS").is_ok_and(|bless| bless == "1") {
        bless(&dir, &pages);
        return;
    }
    let committed = committed(&dir);
    let mut wrong = Vec::new();
    for (name, page) in &pages {
        match committed.get(name) {
            None => wrong.push(format!("{MAN_DIR}/{name} is missing")),
            Some(text) if text != page => {
                wrong.push(format!("{MAN_DIR}/{name} differs from its command"))
            }
            Some(_) => {}
        }
    }
    for name in committed.keys().filter(|name| !pages.contains_key(*name)) {
        wrong.push(format!("{MAN_DIR}/{name} is the page of no command"));
    }
    assert!(
        wrong.is_empty(),
        "the man pages do not match the commands:\n  {}\nwrite them again with \
         `OVERTURE_BLESS=1 cargo test -p overture --bins man_pages`",
        wrong.join("\n  ")
    );
}

#[test]
fn a_page_for_each_visible_command_and_none_for_the_hidden() {
    let pages = pages();
    for name in [
        "overture.1",
        "overture-deploy.1",
        "overture-completions.1",
        "overture-cloud-up.1",
        "overture-cloud-fault-rekey.1",
    ] {
        assert!(pages.contains_key(name), "{name} in {:?}", pages.keys());
    }
    for hidden in [
        "overture-provision.1",
        "overture-host-keys.1",
        "overture-step-run.1",
        "overture-cloud-serve.1",
        "overture-help.1",
        "overture-cloud-help.1",
    ] {
        assert!(!pages.contains_key(hidden), "{hidden} has no page");
    }
    let deploy = String::from_utf8_lossy(&pages["overture-deploy.1"]).into_owned();
    assert!(deploy.contains("OVERTURE_DATA_DIR"), "{deploy}");
}
