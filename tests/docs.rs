//! The README's reference tables are the ones the code prints (`gm docs <table>`).

mod common;

use std::process::Command;

#[test]
fn the_readme_tables_are_the_ones_gm_docs_prints() {
    let readme =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).expect("README.md");
    for table in gm::docs::TABLES {
        let out = Command::new(common::gm_bin()).args(["docs", table]).output().expect("gm docs runs");
        assert!(out.status.success());
        let printed = String::from_utf8(out.stdout).expect("utf8");
        let (start, end) = gm::docs::markers(table);
        let from =
            readme.find(&start).unwrap_or_else(|| panic!("README.md has no `gm docs {table}` table")) + start.len();
        let to = from + readme[from..].find(&end).expect("the table's end marker");
        assert_eq!(
            &readme[from..to],
            printed,
            "README.md's {table} table differs from `gm docs {table}`: run it and paste"
        );
    }
}
