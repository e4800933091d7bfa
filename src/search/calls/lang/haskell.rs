//! Haskell: functions (a function written as several equations is one definition), type
//! classes, their instances (outlined under the instance type's name), data types,
//! `import qualified A.B as M` with `M.f`, `import A.B (f)`, and local functions of a `where`
//! or `let`. A class method is called bare and dispatches on its arguments' types, which gm
//! does not infer: an instance's methods are plain functions, so a call of one is ambiguous
//! when two instances define it, and `Repo.save` names the `Repo` instance's.

use super::{Lang, Rules};

pub const LANGS: &[&Lang] = &[&HASKELL];

pub static HASKELL: Lang = Lang {
    name: "haskell",
    extensions: &["hs"],
    interpreters: &["runhaskell", "runghc", "stack"],
    grammar: || tree_sitter_haskell::LANGUAGE.into(),
    // The crate ships no tags query.
    tags: &[],
    query: &[QUERY],
    rules: Rules::NONE,
};

const QUERY: &str = r#"
(header module: (module) @module)
(class name: (name) @name) @definition.interface
(class_declarations (signature name: (variable) @name) @definition.method @declaration)
(instance patterns: (type_patterns . (name) @name)) @definition.module
(data_type name: (name) @name) @definition.type
(newtype name: (name) @name) @definition.type
(type_synonym name: (name) @name) @definition.type
(function name: (variable) @name) @definition.function @clause
(declarations (bind name: (variable) @name) @definition.function @clause)
(local_binds (bind name: (variable) @name) @definition.function @clause)

(apply function: (variable) @name) @reference.call
(apply function: (qualified module: (module) @qualifier id: (variable) @name)) @reference.call
(infix operator: (infix_id (variable) @name)) @reference.call

(import module: (module) @import.module alias: (module) @import.alias) @import
(import module: (module) @import.module names: (import_list name: (import_name variable: (variable) @import.name))) @import
"#;
