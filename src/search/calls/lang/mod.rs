//! The languages the call index reads, one module each, behind one interface: a [`Lang`] says
//! how its files are recognized, which grammar parses them, which queries find their
//! definitions, calls, imports and typed variables (see `extract.rs` for the captures), and the
//! few rules resolution needs. Adding a language is one file here and one word in
//! [`languages!`] below.

use std::sync::OnceLock;

use super::spec::compile;
pub use super::spec::{Compiled, Lang, Rules};

impl Lang {
    /// The compiled queries; `None` (and a note on stderr, once) when they do not compile
    /// against the grammar, which is a bug in gm that a test catches.
    pub fn compiled(&'static self) -> Option<&'static Compiled> {
        let index = all().iter().position(|l| std::ptr::eq(*l, self))?;
        static COMPILED: OnceLock<Vec<OnceLock<Option<Compiled>>>> = OnceLock::new();
        let slots = COMPILED.get_or_init(|| all().iter().map(|_| OnceLock::new()).collect());
        slots[index]
            .get_or_init(|| match compile(self) {
                Ok(c) => Some(c),
                Err(e) => {
                    gm_actors::stderr_line!("gm: the {} queries do not compile: {e}", self.name);
                    None
                }
            })
            .as_ref()
    }
}

/// Declares the language modules and lists their languages, in the order extensions are tried.
macro_rules! languages {
    ($($module:ident),* $(,)?) => {
        $(mod $module;)*
        /// Every language gm reads.
        pub fn all() -> &'static [&'static Lang] {
            static ALL: OnceLock<Vec<&'static Lang>> = OnceLock::new();
            ALL.get_or_init(|| [$($module::LANGS),*].concat())
        }
    };
}

languages!(
    javascript, typescript, python, rust, go, java, c, cpp, csharp, ruby, php, kotlin, swift, scala, lua, bash, elixir,
    haskell, zig, dart, ocaml, r, julia
);

/// The language of a file from its extension.
pub fn by_extension(rel: &str) -> Option<&'static Lang> {
    let file = rel.rsplit('/').next().unwrap_or(rel);
    let (_, ext) = file.rsplit_once('.')?;
    all().iter().copied().find(|l| l.extensions.contains(&ext))
}

pub fn by_name(name: &str) -> Option<&'static Lang> {
    all().iter().copied().find(|l| l.name == name)
}

/// The languages whose files import and call each other's definitions: JavaScript and
/// TypeScript (with TSX), C and C++, the JVM's Java, Kotlin and Scala; every other language
/// is its own. A module path never names a file of another family (`app/config` in Go is
/// not `app/config.py`), and a name is matched only within its family.
pub fn family(name: &str) -> &'static str {
    match name {
        "javascript" | "typescript" | "tsx" => "js",
        "c" | "cpp" => "c",
        "java" | "kotlin" | "scala" => "jvm",
        "ocaml" | "ocaml_interface" => "ocaml",
        other => by_name(other).map_or("", |l| l.name),
    }
}

/// Whether a file has no extension, so that only its shebang can say what it is.
pub fn extensionless(rel: &str) -> bool {
    let file = rel.rsplit('/').next().unwrap_or(rel);
    !file.contains('.')
}

/// The interpreter a script's first line names (`#!/usr/bin/env python3 -u` -> `python3`).
pub fn shebang_interpreter(first_line: &str) -> Option<&str> {
    let rest = first_line.strip_prefix("#!")?.trim();
    let mut words = rest.split_whitespace();
    let mut program = words.next()?.rsplit('/').next()?;
    if program == "env" {
        program = words.find(|w| !w.starts_with('-') && !w.contains('='))?;
    }
    Some(program)
}

/// The language an interpreter's name belongs to, gm's or another's: `python3.12` is
/// python's, `fish` is shell's. Other languages' names are for the skipped counts.
pub fn by_interpreter(program: &str) -> Result<&'static Lang, &'static str> {
    let base = program.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    if let Some(l) = all().iter().copied().find(|l| l.interpreters.contains(&base) || l.interpreters.contains(&program))
    {
        return Ok(l);
    }
    Err(match base {
        "zsh" | "fish" | "csh" | "tcsh" => "shell",
        "perl" => "perl",
        "awk" | "gawk" => "awk",
        "tclsh" | "wish" => "tcl",
        _ => "other",
    })
}

/// Languages gm does not parse, by extension, for the `skipped` counts of a reply: code an
/// agent would expect callers to cover. Other files (text, data, build files) are not code and
/// not counted.
pub fn other_language(rel: &str) -> Option<&'static str> {
    let file = rel.rsplit('/').next().unwrap_or(rel);
    let (_, ext) = file.rsplit_once('.')?;
    Some(match ext {
        "m" | "mm" => "objective-c",
        "zsh" => "shell",
        "pl" | "pm" => "perl",
        "erl" | "hrl" => "erlang",
        "fs" | "fsx" => "f#",
        "clj" | "cljs" => "clojure",
        "groovy" | "gradle" => "groovy",
        "vue" => "vue",
        "svelte" => "svelte",
        "sql" => "sql",
        "S" | "s" | "asm" => "assembly",
        "vb" => "visual basic",
        "pas" => "pascal",
        "f" | "f90" | "f95" => "fortran",
        "nim" => "nim",
        "cr" => "crystal",
        "v" | "sv" => "verilog",
        "vhd" | "vhdl" => "vhdl",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_language_s_queries_compile_against_its_grammar() {
        for lang in all() {
            let c = compile(lang).unwrap_or_else(|e| panic!("{}: {e}", lang.name));
            assert!(c.own_patterns > 0, "{} has its own query", lang.name);
        }
    }

    #[test]
    fn a_language_comes_from_the_extension_or_the_shebang() {
        assert_eq!(by_extension("src/a.py").map(|l| l.name), Some("python"));
        assert_eq!(by_extension("a.tsx").map(|l| l.name), Some("tsx"));
        assert_eq!(by_extension("lib/x.h").map(|l| l.name), Some("c"));
        assert_eq!(by_extension("Makefile").map(|l| l.name), None);
        assert_eq!(shebang_interpreter("#!/usr/bin/env -S python3 -u"), Some("python3"));
        assert_eq!(shebang_interpreter("#!/bin/bash -e"), Some("bash"));
        assert_eq!(shebang_interpreter("# not one"), None);
        assert_eq!(by_interpreter("python3.12").map(|l| l.name), Ok("python"));
        assert_eq!(by_interpreter("ruby").map(|l| l.name), Ok("ruby"));
        assert_eq!(by_interpreter("node").map(|l| l.name), Ok("javascript"));
        assert_eq!(by_interpreter("bash").map(|l| l.name), Ok("bash"));
        assert_eq!(by_interpreter("fish").map(|l| l.name), Err("shell"));
        assert_eq!(by_extension("app/Main.kt").map(|l| l.name), Some("kotlin"));
        assert_eq!(by_extension("lib/main.dart").map(|l| l.name), Some("dart"));
        assert_eq!(by_extension("lib/store.ml").map(|l| l.name), Some("ocaml"));
        assert_eq!(by_extension("lib/store.mli").map(|l| l.name), Some("ocaml_interface"));
        assert_eq!(by_extension("R/app.R").map(|l| l.name), Some("r"));
        assert_eq!(by_extension("R/app.r").map(|l| l.name), Some("r"));
        assert_eq!(by_extension("src/App.jl").map(|l| l.name), Some("julia"));
        assert_eq!(by_interpreter("Rscript").map(|l| l.name), Ok("r"));
        assert_eq!(other_language("app/main.erl"), Some("erlang"));
        assert_eq!(other_language("README.md"), None);
        assert!(extensionless("bin/tool") && !extensionless("bin/tool.py"));
    }

    #[test]
    fn families_join_languages_that_import_each_other_and_no_others() {
        assert_eq!(family("tsx"), family("javascript"));
        assert_eq!(family("kotlin"), family("java"));
        assert_eq!(family("cpp"), family("c"));
        assert_ne!(family("go"), family("rust"));
        assert_ne!(family("python"), family("java"));
        assert_eq!(family("ocaml_interface"), family("ocaml"));
    }
}
