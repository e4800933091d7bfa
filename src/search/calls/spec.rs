//! The extraction API: what a language gives the extractor ([`Lang`]: its grammar, its
//! queries, its few rules) and what each capture name of a query means ([`Role`]). The
//! language files (`lang/`) and the extractor (`extract.rs`) both depend on this module and
//! never on each other: a language is data for the extractor, and the extractor knows no
//! language.

use tree_sitter::{Language, Query};

use super::facts::{CallKind, DefKind};

/// One language.
pub struct Lang {
    /// The name replies use (`"python"`).
    pub name: &'static str,
    /// File extensions, without the dot.
    pub extensions: &'static [&'static str],
    /// Interpreters a shebang may name for an extensionless script (`python` also matches
    /// `python3` and `python3.12`).
    pub interpreters: &'static [&'static str],
    pub grammar: fn() -> Language,
    /// The grammar's own tags query (`TAGS_QUERY`), in pieces: its `@definition.*` captures,
    /// and its `@reference.call` ones where gm's query has no call at the same place.
    pub tags: &'static [&'static str],
    /// gm's own query, in pieces; it runs before the shipped one and wins where both match.
    pub query: &'static [&'static str],
    /// How the language's calls resolve; most languages need none of it (`Rules::NONE`).
    pub rules: Rules,
}

/// A language's resolution rules, each off unless its file says so.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// What the current object is called inside a method (`self`, `this`, `$this`), and the
    /// names that mean the current type in a qualified call (`Self::new`, `self::build`).
    pub self_names: &'static [&'static str],
    /// A bare call inside a method may call a method of the same class (Java, C#, C++, Ruby).
    pub implicit_self: bool,
    /// A bare call may only reach a function of the same package, which is the file's
    /// directory (Go).
    pub package_is_directory: bool,
    /// A file is a module named by its file name capitalized, which nothing in it declares
    /// (OCaml's `store.ml` is `Store`): a module path or qualifier names it so.
    pub capitalized_file_modules: bool,
    /// A function's methods are told apart by their arguments' types, a call choosing one at
    /// run time (Julia's multiple dispatch): a method is defined for its first argument's
    /// type (`@owner`), is called bare like a function, and a call whose first argument's
    /// type the file says (`@dispatch`) reaches that type's method.
    pub dispatch: bool,
}

impl Rules {
    /// No self names, every switch off: what a language file starts from.
    pub const NONE: Rules = Rules {
        self_names: &[],
        implicit_self: false,
        package_is_directory: false,
        capitalized_file_modules: false,
        dispatch: false,
    };
}

/// A language's queries compiled once: gm's own patterns first, then the shipped ones.
pub struct Compiled {
    pub query: Query,
    /// Patterns below this index are gm's own.
    pub own_patterns: usize,
    /// What each capture (by index) means to the extractor.
    pub roles: Vec<Role>,
}

impl Lang {
    pub fn language(&self) -> Language {
        (self.grammar)()
    }
}

/// A language's queries compiled: gm's own patterns first, then the shipped ones, with the
/// shipped patterns gm cannot use disabled.
pub fn compile(lang: &Lang) -> Result<Compiled, tree_sitter::QueryError> {
    let own: String = lang.query.concat();
    let shipped: String = lang.tags.concat();
    let own_patterns = Query::new(&lang.language(), &own)?.pattern_count();
    let mut query = Query::new(&lang.language(), &format!("{own}\n{shipped}"))?;
    for i in own_patterns..query.pattern_count() {
        // A shipped pattern that needs a locals analysis gm does not run (`#is-not? local`)
        // would match every identifier; one that captures nothing gm reads only costs time.
        let wanted = query.capture_quantifiers(i).iter().zip(query.capture_names()).any(|(q, name)| {
            *q != tree_sitter::CaptureQuantifier::Zero && (name.starts_with("definition.") || *name == "reference.call")
        });
        if !query.property_predicates(i).is_empty() || !wanted {
            query.disable_pattern(i);
        }
    }
    let unused: Vec<String> =
        query.capture_names().iter().filter(|n| unused_capture(n)).map(|n| n.to_string()).collect();
    for name in unused {
        query.disable_capture(&name);
    }
    let roles = query.capture_names().iter().map(|n| role(n)).collect();
    Ok(Compiled { query, own_patterns, roles })
}

/// What a capture means to the extractor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Name,
    Definition(DefKind),
    Reference(CallKind),
    Receiver,
    Dispatch,
    Qualifier,
    Owner,
    Base,
    Declaration,
    Extends,
    Clause,
    Import,
    ImportModule,
    ImportName,
    ImportAlias,
    BindName,
    BindField,
    BindType,
    Module,
    /// Read by a predicate only, or not at all.
    Other,
}

pub fn role(capture: &str) -> Role {
    if let Some(kind) = capture.strip_prefix("definition.") {
        return DefKind::from_capture(kind).map_or(Role::Other, Role::Definition);
    }
    match capture {
        "name" => Role::Name,
        "reference.call" => Role::Reference(CallKind::Call),
        "reference.new" => Role::Reference(CallKind::New),
        "reference.macro" => Role::Reference(CallKind::Macro),
        "reference.in_macro" => Role::Reference(CallKind::InMacro),
        "receiver" => Role::Receiver,
        "dispatch" => Role::Dispatch,
        "qualifier" => Role::Qualifier,
        "owner" => Role::Owner,
        "base" => Role::Base,
        "declaration" => Role::Declaration,
        "extends" => Role::Extends,
        "clause" => Role::Clause,
        "import" => Role::Import,
        "import.module" => Role::ImportModule,
        "import.name" => Role::ImportName,
        "import.alias" => Role::ImportAlias,
        "bind.name" => Role::BindName,
        "bind.field" => Role::BindField,
        "bind.type" => Role::BindType,
        "module" => Role::Module,
        _ => Role::Other,
    }
}

/// Captures of the shipped queries that only their own tools read (doc comments for the
/// `#strip!`/`#select-adjacent!` directives): dropping them saves recording them.
pub fn unused_capture(capture: &str) -> bool {
    matches!(capture, "doc" | "ignore" | "local.scope")
}
