package io.quailspark;

import java.util.function.Function;

import scala.runtime.AbstractPartialFunction;

/**
 * Catalyst's {@code transform*} and {@code resolve*} from Java: the Scala partial function of {@code f},
 * defined where {@code f} gives non-null; a node it gives null for stays as it is. A plan rewrite that
 * returns its node unchanged where nothing matches is defined everywhere.
 */
final class Rewrite<T> extends AbstractPartialFunction<T, T> {
    private final Function<T, T> f;

    Rewrite(Function<T, T> f) {
        this.f = f;
    }

    @Override
    public boolean isDefinedAt(T x) {
        return f.apply(x) != null;
    }

    @Override
    public <A1 extends T, B1> B1 applyOrElse(A1 x, scala.Function1<A1, B1> dflt) {
        T out = f.apply(x);
        @SuppressWarnings("unchecked")
        B1 b = out != null ? (B1) out : dflt.apply(x);
        return b;
    }
}
