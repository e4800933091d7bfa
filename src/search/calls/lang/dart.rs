//! Dart: classes, mixins, enums and their methods (an abstract method is a declaration),
//! named and factory constructors (`Repo.open()` reaches them), extensions (`extension X on
//! Repo`: their methods are Repo's, as an `impl` block's), top-level and local functions,
//! closures bound to a variable (`final inner = (x) => ..`), `import '..' as m` with `m.f()`,
//! `this`, and a bare call in a method reaching the class's own method. A receiver is typed by
//! a declared type (`Cache c`, a parameter's, a field's) or by a constructor call (`final r =
//! Repo()`, Dart needing no `new`); a cascade (`r..save()..flush()`) calls its target's
//! methods. An import without `as` brings in every name of the file without naming it: it is
//! not recorded. A named constructor's result (`final r = Repo.open()`) types nothing: the
//! call reads the same as a static method's, which may return anything.

use super::{Lang, Rules};

pub const LANGS: &[&Lang] = &[&DART];

pub static DART: Lang = Lang {
    name: "dart",
    extensions: &["dart"],
    interpreters: &["dart"],
    grammar: || tree_sitter_dart::LANGUAGE.into(),
    // The shipped query tags a method by its signature, which leaves the body, and so the
    // calls in it, outside the method; gm's query takes the whole declaration.
    tags: &[],
    query: &[QUERY],
    rules: Rules {
        self_names: &["this"],
        implicit_self: true,
        ..Rules::NONE
    },
};

const QUERY: &str = r#"
(class_declaration name: (identifier) @name) @definition.class
(class_declaration name: (identifier) @name superclass: (superclass type: (type . (type_identifier) @base))) @definition.class
(class_declaration name: (identifier) @name interfaces: (interfaces (type . (type_identifier) @base))) @definition.class
(class_declaration name: (identifier) @name superclass: (superclass (mixins (type . (type_identifier) @base)))) @definition.class
(mixin_declaration (identifier) @name) @definition.class
(extension_declaration class: (type . (type_identifier) @name)) @definition.impl
(enum_declaration name: (identifier) @name) @definition.enum
(method_declaration signature: (method_signature [(function_signature name: (identifier) @name) (getter_signature name: (identifier) @name) (setter_signature name: (identifier) @name)])) @definition.method
(member_declaration (declaration (function_signature name: (identifier) @name))) @definition.method @declaration
(member_declaration [(declaration (constructor_signature "." . (identifier) @name)) (method_declaration (method_signature [(constructor_signature "." . (identifier) @name) (factory_constructor_signature "." . (identifier) @name)]))]) @definition.constructor
(function_declaration signature: (function_signature name: (identifier) @name)) @definition.function
(local_function_declaration (function_signature name: (identifier) @name)) @definition.function
(initialized_variable_declaration name: (identifier) @name value: (function_expression)) @definition.function

(call_expression function: (identifier) @name) @reference.call
(call_expression function: [(member_expression object: _ @receiver property: (identifier) @name) (null_aware_member_expression object: _ @receiver property: (identifier) @name)]) @reference.call
(cascade . (_) @receiver (cascade_section (cascade_call_expression property: (identifier) @name) @reference.call))

(library_import (import_specification uri: (configurable_uri (uri (string_literal) @import.module)) alias: (identifier) @import.alias)) @import

(formal_parameter (type . (type_identifier) @bind.type) name: (identifier) @bind.name)
(initialized_variable_declaration (type . (type_identifier) @bind.type) name: (identifier) @bind.name)
(class_body (member_declaration (declaration (type . (type_identifier) @bind.type) (initialized_identifier_list (initialized_identifier name: (identifier) @bind.field)))))
(initialized_variable_declaration name: (identifier) @bind.name value: (call_expression function: (identifier) @bind.type) (#match? @bind.type "^[A-Z]"))
"#;
