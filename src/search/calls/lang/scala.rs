//! Scala: classes, traits, objects (a companion object's methods are its class's:
//! `Repo.open()`) and enums, `this`, bare calls of the type's own methods, `import a.b.C`,
//! `import a.b.{C, D => E}`, and receivers typed by a declaration (`val r: Repo`, a parameter,
//! a class parameter) or by a constructor (`new Cache()`, a case class's `Point(1, 2)`). A
//! lambda bound to a `val` is a function of that name.

use super::{Lang, Rules};

pub const LANGS: &[&Lang] = &[&SCALA];

pub static SCALA: Lang = Lang {
    name: "scala",
    extensions: &["scala", "sc"],
    interpreters: &["scala"],
    grammar: || tree_sitter_scala::LANGUAGE.into(),
    // The crate ships no tags query.
    tags: &[],
    query: &[QUERY],
    rules: Rules {
        self_names: &["this", "super"],
        implicit_self: true,
        ..Rules::NONE
    },
};

// An object is taken as a class: its methods are then its name's, which is how a companion
// object's factory is called (`Repo.open()` reaches `object Repo`'s `open`). A call of a
// capitalized name without `new` (a case class's `apply`) types a variable; a lowercase one
// types nothing.
const QUERY: &str = r#"
(package_clause name: (package_identifier) @module)
(class_definition name: (identifier) @name (extends_clause type: [(type_identifier) @base (generic_type type: (type_identifier) @base)])?) @definition.class
(object_definition name: (identifier) @name (extends_clause type: [(type_identifier) @base (generic_type type: (type_identifier) @base)])?) @definition.class
(trait_definition name: (identifier) @name (extends_clause type: [(type_identifier) @base (generic_type type: (type_identifier) @base)])?) @definition.trait
(enum_definition name: (identifier) @name) @definition.enum
(type_definition name: (type_identifier) @name) @definition.type
(function_definition name: (identifier) @name) @definition.function
(function_declaration name: (identifier) @name) @definition.function
(val_definition pattern: (identifier) @name value: (lambda_expression)) @definition.function

(call_expression function: [(identifier) @name (generic_function function: (identifier) @name)]) @reference.call
(call_expression function: [(field_expression value: (_) @receiver field: (identifier) @name) (generic_function function: (field_expression value: (_) @receiver field: (identifier) @name))]) @reference.call
(instance_expression [(type_identifier) @name (generic_type type: (type_identifier) @name)]) @reference.new

(import_declaration (identifier) @import.name .) @import @import.module
(import_declaration (namespace_selectors [(identifier) @import.name (arrow_renamed_identifier name: (identifier) @import.name alias: (identifier) @import.alias)])) @import @import.module

(parameter name: (identifier) @bind.name type: (_) @bind.type)
(class_parameter name: (identifier) @bind.field type: (_) @bind.type)
(val_definition pattern: (identifier) @bind.name type: (_) @bind.type)
(var_definition pattern: (identifier) @bind.name type: (_) @bind.type)
(val_definition pattern: (identifier) @bind.name value: (instance_expression [(type_identifier) (generic_type)] @bind.type))
(var_definition pattern: (identifier) @bind.name value: (instance_expression [(type_identifier) (generic_type)] @bind.type))
(val_definition pattern: (identifier) @bind.name value: (call_expression function: (identifier) @bind.type) (#match? @bind.type "^[A-Z]"))
(var_definition pattern: (identifier) @bind.name value: (call_expression function: (identifier) @bind.type) (#match? @bind.type "^[A-Z]"))
(template_body (val_definition pattern: (identifier) @bind.field type: (_) @bind.type))
(template_body (var_definition pattern: (identifier) @bind.field type: (_) @bind.type))
(template_body (val_definition pattern: (identifier) @bind.field value: (instance_expression [(type_identifier) (generic_type)] @bind.type)))
(template_body (var_definition pattern: (identifier) @bind.field value: (instance_expression [(type_identifier) (generic_type)] @bind.type)))
"#;
